package cliargs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// DefaultHub is the hub URL without --hub or LMOS_HUB_URL.
const DefaultHub = "http://localhost:8080"

// ErrReported marks a failure already written to stderr.
var ErrReported = errors.New("reported")

// UsageError is a mistake in the command line: exit status 2 and the usage.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef makes a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Sprintf(format, a...)} }

// Client is one invocation of a subcommand that talks to a running hub's
// HTTP API: where it writes and the hub it talks to.
type Client struct {
	Stdout, Stderr io.Writer
	Base, Token    string
	HTTP           *http.Client
	// Hint returns a line that tells the user what to do about a refusal
	// (status) of what ("" for none).
	Hint func(status int, what string) string
}

// HubCommand parses the flags every hub subcommand shares (--hub,
// --token, --timeout, with LMOS_HUB_URL and LMOS_HUB_TOKEN) beside a
// command's own on fs, and runs it.
type HubCommand struct {
	// Name is the subcommand as the user typed it ("join deny").
	Name, Usage string
	fs          *flag.FlagSet
	hub, token  *string
	timeout     *time.Duration
	getenv      func(string) string
}

// NewHubCommand returns the flag set of subcommand name with the shared
// flags on it; the caller adds its own before Run. getenv reads the
// environment (nil: an empty one).
func NewHubCommand(name, usage string, getenv func(string) string) (*HubCommand, *flag.FlagSet) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	h := &HubCommand{Name: name, Usage: usage, fs: fs, getenv: getenv}
	h.hub = fs.String("hub", "", "")
	h.token = fs.String("token", getenv("LMOS_HUB_TOKEN"), "")
	h.timeout = fs.Duration("timeout", 10*time.Second, "")
	return h, fs
}

// Run parses args, fills c with the hub it names and runs run with the
// positional arguments. It returns the exit status: 0 ok, 1 the request
// failed, 2 a usage error.
func (h *HubCommand) Run(c *Client, args []string, run func(pos []string) error) int {
	pos, err := Parse(h.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.Stdout, h.Usage)
		return 0
	}
	if err == nil && *h.timeout <= 0 {
		err = fmt.Errorf("--timeout must be above 0, got %s", *h.timeout)
	}
	if err == nil {
		hub := *h.hub
		if hub == "" {
			hub = h.getenv("LMOS_HUB_URL")
		}
		if hub == "" {
			hub = DefaultHub
		}
		var u *url.URL
		if u, err = HubURL(hub); err != nil {
			err = fmt.Errorf("--hub: %w", err)
		} else {
			c.Base = u.String()
		}
	}
	if err != nil {
		return UsageErr(c.Stderr, h.Name, err.Error())
	}
	c.Token, c.HTTP = *h.token, &http.Client{Timeout: *h.timeout}
	err = run(pos)
	var ue UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return UsageErr(c.Stderr, h.Name, err.Error())
	case !errors.Is(err, ErrReported):
		fmt.Fprintln(c.Stderr, "error:", err)
	}
	return 1
}

// Do sends one request (body, if not nil, as JSON) and returns the
// answer's status, header and body.
func (c *Client) Do(method, path string, body any) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("cannot encode the request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.Base+path, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot build the request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", lmos.MediaJSON)
	}
	req.Header.Set("Accept", lmos.MediaJSON)
	req.Header.Set("User-Agent", "lmos-hub-cli")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot talk to the hub at %s (is it running? --hub or LMOS_HUB_URL): %w", c.Base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot read the hub's answer: %w", err)
	}
	return resp.StatusCode, resp.Header, data, nil
}

// Report writes a refusal (a problem document) of what ("" for the
// command itself) to stderr, with the client's hint, and returns
// ErrReported.
func (c *Client) Report(status int, body []byte, what string) error {
	line := fmt.Sprintf("%d %s", status, http.StatusText(status))
	var p lmos.Problem
	if json.Unmarshal(body, &p) == nil && p.Detail != "" {
		line += ": " + p.Detail
	}
	if what != "" {
		line = what + ": " + line
	}
	fmt.Fprintln(c.Stderr, "error: "+line)
	for _, f := range p.ValidationErrors {
		fmt.Fprintf(c.Stderr, "  %s: %s\n", f.Field, f.Description)
	}
	if c.Hint != nil {
		if h := c.Hint(status, what); h != "" {
			fmt.Fprintln(c.Stderr, "hint: "+h)
		}
	}
	return ErrReported
}

// PrintJSON writes a JSON answer indented to stdout.
func (c *Client) PrintJSON(body []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		return fmt.Errorf("the hub's answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := c.Stdout.Write(buf.Bytes())
	return err
}

// OK reports whether status is a success.
func OK(status int) bool { return status >= 200 && status < 300 }

// Each sends one request without a body per item (req gives its method
// and path) and prints "done item" for each success; it reports a refusal
// and goes on with the next item, and fails at the end if any was refused.
func (c *Client) Each(items []string, done string, req func(item string) (method, path string)) error {
	failed := false
	for _, item := range items {
		method, path := req(item)
		status, _, body, err := c.Do(method, path, nil)
		if err != nil {
			return err
		}
		if !OK(status) {
			c.Report(status, body, item)
			failed = true
			continue
		}
		fmt.Fprintln(c.Stdout, done, Cell(item))
	}
	if failed {
		return ErrReported
	}
	return nil
}

// Begin handles what every hub subcommand does before its own flags: no
// command (one line pointing to path's --help, exit 2) and help (the
// usage on stdout, exit 0). It returns
// the command's name, or ok false with the exit status when it is done.
// commands lists the commands for the error ("ls, approve or deny").
func Begin(args []string, stdout, stderr io.Writer, path, usage, commands string) (name string, code int, ok bool) {
	if len(args) == 0 {
		return "", UsageErr(stderr, path, "missing command: "+commands), false
	}
	name = args[0]
	if IsHelp(name) {
		fmt.Fprint(stdout, usage)
		return "", 0, false
	}
	return name, 0, true
}

// TokenHint tells what to do about a refusal for want of the right token:
// task names what needs it ("pairing"), scope the scope it takes
// ("admin", "operate"; a token of a wider scope does too). "" when the
// refusal is of another kind.
func (c *Client) TokenHint(status int, task, scope string) string {
	need := task + " needs a token of scope " + scope
	if scope != "admin" {
		need += " or admin"
	}
	switch {
	case status == http.StatusUnauthorized && c.Token == "":
		return need + ": pass --token TOKEN or set LMOS_HUB_TOKEN"
	case status == http.StatusUnauthorized:
		return "the hub did not accept the token; check it, or make one with `lmos-hub token create --scope " + scope + "`"
	case status == http.StatusForbidden && c.Token != "":
		return need
	}
	return ""
}

// Read GETs path and decodes the hub's JSON answer into out, with what
// naming it in the error ("a list of peers"); with asJSON it prints the
// answer as the hub sent it instead and reports printed. A refusal is
// reported (Report) as an error.
func (c *Client) Read(path string, asJSON bool, out any, what string) (printed bool, err error) {
	status, _, body, err := c.Do(http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	if !OK(status) {
		return false, c.Report(status, body, "")
	}
	if asJSON {
		return true, c.PrintJSON(body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return false, fmt.Errorf("the hub's answer to GET %s is not %s: %w", path, what, err)
	}
	return false, nil
}
