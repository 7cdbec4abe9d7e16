// Package joincli is `lmos-hub join`: the joins parked for approval (join
// mode approve) listed, approved and denied — one by one or in bulk —
// through a running hub's HTTP API (/api/join, PROTOCOL §4.4). The hub
// holds the store's lock, so the CLI never opens the data directory.
package joincli

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
	"text/tabwriter"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/cliargs"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Usage is the help text of `lmos-hub join`.
const Usage = `usage: lmos-hub join <command> [flags] [arguments]

Decides on the joins parked for approval (join.mode approve) on a running hub.

Commands:
  ls [--json]                         list the pending joins, oldest first
  approve ID...                       approve joins: their Things are registered
  deny ID...                          deny joins (no ban: a Thing may ask again)
  deny --all | [--source ADDR] [--older-than D]
                                      deny in bulk: every pending join, or those from
                                      ADDR (an address or IPv6 /64 as ls shows it)
                                      and/or waiting for longer than D (e.g. 2h)

Flags of every command:
  --hub URL         the hub (env LMOS_HUB_URL, default http://localhost:8080)
  --token TOKEN     an admin token (env LMOS_HUB_TOKEN)
  --timeout D       give up on a request after D (default 10s)

Exit status: 0 ok, 1 request failed, 2 usage error.
`

// DefaultHub is the hub URL without --hub or LMOS_HUB_URL.
const DefaultHub = "http://localhost:8080"

// errReported marks a failure already written to stderr.
var errReported = errors.New("reported")

type usageErr struct{ msg string }

func (e usageErr) Error() string { return e.msg }

func usageError(format string, a ...any) error { return usageErr{fmt.Sprintf(format, a...)} }

// Run runs `lmos-hub join` with args (the arguments after "join"); getenv
// reads the environment (nil: none). It returns the exit status.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "error: missing command: ls, approve or deny")
		fmt.Fprint(stderr, Usage)
		return 2
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	c := &command{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("join "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	hubURL := fs.String("hub", "", "")
	token := fs.String("token", getenv("LMOS_HUB_TOKEN"), "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	var run func(pos []string) error
	switch name {
	case "ls":
		asJSON := fs.Bool("json", false, "")
		run = func(pos []string) error {
			if len(pos) > 0 {
				return usageError("join ls takes no arguments, got %q", pos[0])
			}
			return c.list(*asJSON)
		}
	case "approve":
		run = func(pos []string) error {
			if len(pos) == 0 {
				return usageError("join approve needs at least one Thing id")
			}
			return c.decide(pos, "approve", "approved")
		}
	case "deny":
		all := fs.Bool("all", false, "")
		source := fs.String("source", "", "")
		olderThan := fs.Duration("older-than", 0, "")
		run = func(pos []string) error {
			bulk := *all || *source != "" || *olderThan != 0
			switch {
			case bulk && len(pos) > 0:
				return usageError("join deny takes Thing ids or --all/--source/--older-than, not both")
			case !bulk && len(pos) == 0:
				return usageError("join deny needs Thing ids, --all, --source ADDR or --older-than D")
			case *all && (*source != "" || *olderThan != 0):
				return usageError("join deny --all denies every pending join: give it alone")
			case *olderThan < 0:
				return usageError("--older-than must be 0 or more, got %s", *olderThan)
			case !bulk:
				return c.decide(pos, "deny", "denied")
			}
			body := map[string]any{}
			if *all {
				body["all"] = true
			}
			if *source != "" {
				body["source"] = *source
			}
			if *olderThan > 0 {
				body["olderThan"] = olderThan.String()
			}
			return c.denyAll(body)
		}
	default:
		fmt.Fprintf(stderr, "error: unknown command %q: use ls, approve or deny\n", name)
		fmt.Fprint(stderr, Usage)
		return 2
	}
	pos, err := cliargs.Parse(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	if err == nil && *timeout <= 0 {
		err = fmt.Errorf("--timeout must be above 0, got %s", *timeout)
	}
	if err == nil {
		hub := *hubURL
		if hub == "" {
			hub = getenv("LMOS_HUB_URL")
		}
		if hub == "" {
			hub = DefaultHub
		}
		var u *url.URL
		if u, err = cliargs.HubURL(hub); err != nil {
			err = fmt.Errorf("--hub: %w", err)
		} else {
			c.base = u.String()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: join %s: %v\n", name, err)
		fmt.Fprint(stderr, Usage)
		return 2
	}
	c.token, c.http = *token, &http.Client{Timeout: *timeout}
	err = run(pos)
	var ue usageErr
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %v\n", err)
		fmt.Fprint(stderr, Usage)
		return 2
	case !errors.Is(err, errReported):
		fmt.Fprintln(stderr, "error:", err)
	}
	return 1
}

// command is one invocation: where it writes and the hub it talks to.
type command struct {
	stdout, stderr io.Writer
	base, token    string
	http           *http.Client
}

// do sends one request and returns the answer's status and body.
func (c *command) do(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("cannot encode the request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("cannot build the request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", lmos.MediaJSON)
	}
	req.Header.Set("Accept", lmos.MediaJSON)
	req.Header.Set("User-Agent", "lmos-hub-cli")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("cannot talk to the hub at %s (is it running? --hub or LMOS_HUB_URL): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("cannot read the hub's answer: %w", err)
	}
	return resp.StatusCode, data, nil
}

// report writes a refusal (a problem document) to stderr.
func (c *command) report(status int, body []byte, what string) error {
	line := fmt.Sprintf("%d %s", status, http.StatusText(status))
	var p lmos.Problem
	if json.Unmarshal(body, &p) == nil && p.Detail != "" {
		line += ": " + p.Detail
	}
	if what != "" {
		line = what + ": " + line
	}
	fmt.Fprintln(c.stderr, "error: "+line)
	for _, f := range p.ValidationErrors {
		fmt.Fprintf(c.stderr, "  %s: %s\n", f.Field, f.Description)
	}
	switch {
	case status == http.StatusUnauthorized && c.token == "":
		fmt.Fprintln(c.stderr, "hint: join approval needs an admin token: pass --token TOKEN or set LMOS_HUB_TOKEN")
	case status == http.StatusUnauthorized:
		fmt.Fprintln(c.stderr, "hint: the hub did not accept the token; check it, or make one with `lmos-hub token create`")
	case status == http.StatusForbidden && c.token != "" && what == "":
		fmt.Fprintln(c.stderr, "hint: join approval needs a token of scope admin")
	}
	return errReported
}

func ok(status int) bool { return status >= 200 && status < 300 }

// pending is one entry of GET /api/join.
type pending struct {
	ID       string    `json:"id"`
	Title    string    `json:"title"`
	Door     string    `json:"door"`
	Source   string    `json:"source"`
	Signer   string    `json:"signer"`
	Proven   bool      `json:"proven"`
	Received time.Time `json:"received"`
	Expires  time.Time `json:"expires"`
}

func (c *command) list(asJSON bool) error {
	status, body, err := c.do(http.MethodGet, "/api/join", nil)
	if err != nil {
		return err
	}
	if !ok(status) {
		return c.report(status, body, "")
	}
	if asJSON {
		var buf bytes.Buffer
		if err := json.Indent(&buf, body, "", "  "); err != nil {
			return fmt.Errorf("the hub's answer is not JSON: %w", err)
		}
		buf.WriteByte('\n')
		_, err := c.stdout.Write(buf.Bytes())
		return err
	}
	var st struct {
		Mode string    `json:"mode"`
		List []pending `json:"list"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("the hub's answer to GET /api/join is not the join state: %w", err)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTITLE\tDOOR\tSOURCE\tRECEIVED\tEXPIRES\tPROVEN")
	for _, p := range st.List {
		proven := ""
		if p.Proven {
			proven = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cliargs.Cell(p.ID), cliargs.Cell(p.Title), cliargs.Cell(p.Door), cliargs.Cell(p.Source),
			p.Received.Local().Format(time.DateTime), p.Expires.Local().Format(time.DateTime), proven)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.List) == 0 && st.Mode != "approve" {
		fmt.Fprintf(c.stderr, "note: the hub's join mode is %s: joins are parked only under approve\n", st.Mode)
	}
	return nil
}

// decide approves or denies each id; it goes on after a refusal and fails
// at the end.
func (c *command) decide(ids []string, verb, done string) error {
	failed := false
	for _, id := range ids {
		status, body, err := c.do(http.MethodPost, "/api/join/pending/"+url.PathEscape(id)+"/"+verb, nil)
		if err != nil {
			return err
		}
		if !ok(status) {
			c.report(status, body, id)
			failed = true
			continue
		}
		fmt.Fprintln(c.stdout, done, id)
	}
	if failed {
		return errReported
	}
	return nil
}

func (c *command) denyAll(filter map[string]any) error {
	status, body, err := c.do(http.MethodPost, "/api/join/pending/deny", filter)
	if err != nil {
		return err
	}
	if !ok(status) {
		return c.report(status, body, "")
	}
	var res struct {
		Denied  []string `json:"denied"`
		Pending int      `json:"pending"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("the hub's answer is not a denial's result: %s", lmos.Truncate(string(body), 200))
	}
	for _, id := range res.Denied {
		fmt.Fprintln(c.stdout, "denied", cliargs.Cell(id))
	}
	_, err = fmt.Fprintf(c.stdout, "%d denied, %d still pending\n", len(res.Denied), res.Pending)
	return err
}
