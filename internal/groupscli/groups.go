// Package groupscli is `lmos-hub groups`: agent groups managed through a
// running hub's HTTP API (/api/groups, PROTOCOL §7). The hub holds the
// store's lock, so the CLI never opens the data directory itself.
package groupscli

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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/cliargs"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Usage is the help text of `lmos-hub groups`.
const Usage = `usage: lmos-hub groups <command> [flags] [arguments]

Manages agent groups on a running hub over its HTTP API.

Commands:
  ls [--json]                         list the groups (ID, TITLE, MEMBERS, FLAGS)
  create --title T [--id ID] [--description D] [--require-signed] [--self-join] [THING...]
                                      create a group (the hub names it without --id)
  add GROUP THING...                  add Things to a group
  rm GROUP THING...                   remove Things from a group
  dissolve GROUP...                   dissolve groups (every membership is revoked)
  rotate-credentials                  (admin token) start a new status list: every membership
                                      credential issued before is revoked, members get new ones;
                                      recovers a list whose entries are all in use or revoked

Flags of every command:
  --hub URL         the hub (env LMOS_HUB_URL, default http://localhost:8080)
  --token TOKEN     a token of scope operate or admin bound to no Thing, needed for every change
                    (env LMOS_HUB_TOKEN)
  --timeout D       give up on a request after D (default 10s)

Exit status: 0 ok, 1 request failed, 2 usage error.
`

// DefaultHub is the hub URL without --hub or LMOS_HUB_URL.
const DefaultHub = "http://localhost:8080"

// errReported marks a failure already written to stderr.
var errReported = errors.New("reported")

// Run runs `lmos-hub groups` with args (the arguments after "groups");
// getenv reads the environment (nil: none). It returns the exit status.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "error: missing command: ls, create, add, rm, dissolve or rotate-credentials")
		fmt.Fprint(stderr, Usage)
		return 2
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	c := &command{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("groups "+name, flag.ContinueOnError)
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
				return usageError("groups ls takes no arguments, got %q", pos[0])
			}
			return c.list(*asJSON)
		}
	case "create":
		id := fs.String("id", "", "")
		title := fs.String("title", "", "")
		desc := fs.String("description", "", "")
		signed := fs.Bool("require-signed", false, "")
		self := fs.Bool("self-join", false, "")
		run = func(pos []string) error {
			if strings.TrimSpace(*title) == "" {
				return usageError("groups create needs --title")
			}
			body := map[string]any{"title": *title, "requireSigned": *signed, "selfJoin": *self, "members": nonNil(pos)}
			if *id != "" {
				body["id"] = *id
			}
			if *desc != "" {
				body["description"] = *desc
			}
			return c.create(body)
		}
	case "add", "rm":
		run = func(pos []string) error {
			if len(pos) < 2 {
				return usageError("groups %s takes a group and at least one Thing id", name)
			}
			return c.members(pos[0], pos[1:], name == "add")
		}
	case "dissolve":
		run = func(pos []string) error {
			if len(pos) == 0 {
				return usageError("groups dissolve needs at least one group id")
			}
			return c.dissolve(pos)
		}
	case "rotate-credentials":
		run = func(pos []string) error {
			if len(pos) > 0 {
				return usageError("groups rotate-credentials takes no arguments, got %q", pos[0])
			}
			return c.rotate()
		}
	default:
		fmt.Fprintf(stderr, "error: unknown command %q: use ls, create, add, rm, dissolve or rotate-credentials\n", name)
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
		c.base, err = hubBase(hub)
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: groups %s: %v\n", name, err)
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

type usageErr struct{ msg string }

func (e usageErr) Error() string { return e.msg }

func usageError(format string, a ...any) error { return usageErr{fmt.Sprintf(format, a...)} }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// hubBase accepts http(s)://host:port[/prefix] or host:port.
func hubBase(s string) (string, error) {
	u, err := cliargs.HubURL(s)
	if err != nil {
		return "", fmt.Errorf("--hub: %w", err)
	}
	return u.String(), nil
}

// command is one invocation: where it writes and the hub it talks to.
type command struct {
	stdout, stderr io.Writer
	base, token    string
	http           *http.Client
}

// group is a group as the hub shows it.
type group struct {
	ID            string   `json:"id"`
	Title         string   `json:"title"`
	Description   string   `json:"description"`
	Members       []string `json:"members"`
	RequireSigned bool     `json:"requireSigned"`
	SelfJoin      bool     `json:"selfJoin"`
}

// do sends one request and returns the answer's status and body.
func (c *command) do(method, path string, body any) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("cannot encode the request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot build the request: %w", err)
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
		return 0, nil, nil, fmt.Errorf("cannot talk to the hub at %s (is it running? --hub or LMOS_HUB_URL): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cannot read the hub's answer: %w", err)
	}
	return resp.StatusCode, resp.Header, data, nil
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
		fmt.Fprintln(c.stderr, "hint: changing groups needs a token of scope operate or admin: pass --token TOKEN or set LMOS_HUB_TOKEN")
	case status == http.StatusUnauthorized:
		fmt.Fprintln(c.stderr, "hint: the hub did not accept the token; check it, or make one with `lmos-hub token create --scope operate`")
	case status == http.StatusForbidden && c.token != "":
		fmt.Fprintln(c.stderr, "hint: the token's scope may not change groups: use one of scope operate or admin")
	}
	return errReported
}

func ok(status int) bool { return status >= 200 && status < 300 }

func (c *command) list(asJSON bool) error {
	status, _, body, err := c.do(http.MethodGet, "/api/groups", nil)
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
	var groups []group
	if err := json.Unmarshal(body, &groups); err != nil {
		return fmt.Errorf("the hub's answer to GET /api/groups is not a list of groups: %w", err)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTITLE\tMEMBERS\tFLAGS")
	for _, g := range groups {
		var flags []string
		if g.RequireSigned {
			flags = append(flags, "require-signed")
		}
		if g.SelfJoin {
			flags = append(flags, "self-join")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cliargs.Cell(g.ID), cliargs.Cell(g.Title), cliargs.Cell(strings.Join(g.Members, ",")), cliargs.Cell(strings.Join(flags, ",")))
	}
	return tw.Flush()
}

func (c *command) create(body map[string]any) error {
	status, _, resp, err := c.do(http.MethodPost, "/api/groups", body)
	if err != nil {
		return err
	}
	if !ok(status) {
		return c.report(status, resp, "")
	}
	var g group
	if err := json.Unmarshal(resp, &g); err != nil || g.ID == "" {
		return fmt.Errorf("the hub's answer is not a group: %s", lmos.Truncate(string(resp), 200))
	}
	_, err = fmt.Fprintln(c.stdout, "created", g.ID)
	return err
}

// members adds or removes each Thing; it goes on after a refusal and
// fails at the end.
func (c *command) members(gid string, things []string, add bool) error {
	method, verb := http.MethodPut, "added"
	if !add {
		method, verb = http.MethodDelete, "removed"
	}
	failed := false
	for _, thing := range things {
		status, _, body, err := c.do(method, "/api/groups/"+url.PathEscape(gid)+"/members/"+url.PathEscape(thing), nil)
		if err != nil {
			return err
		}
		if !ok(status) {
			c.report(status, body, thing)
			failed = true
			continue
		}
		fmt.Fprintln(c.stdout, verb, thing)
	}
	if failed {
		return errReported
	}
	return nil
}

func (c *command) dissolve(gids []string) error {
	failed := false
	for _, gid := range gids {
		status, _, body, err := c.do(http.MethodDelete, "/api/groups/"+url.PathEscape(gid), nil)
		if err != nil {
			return err
		}
		if !ok(status) {
			c.report(status, body, gid)
			failed = true
			continue
		}
		fmt.Fprintln(c.stdout, "dissolved", gid)
	}
	if failed {
		return errReported
	}
	return nil
}

// rotate starts a new status list generation (PROTOCOL §7.1).
func (c *command) rotate() error {
	status, _, body, err := c.do(http.MethodPost, "/api/credentials/status/rotate", nil)
	if err != nil {
		return err
	}
	if !ok(status) {
		if status == http.StatusForbidden {
			fmt.Fprintln(c.stderr, "hint: rotating the status list needs an admin token")
		}
		return c.report(status, body, "")
	}
	var rot struct {
		Generation int    `json:"generation"`
		Members    int    `json:"members"`
		StatusList string `json:"statusList"`
	}
	if err := json.Unmarshal(body, &rot); err != nil || rot.Generation < 1 {
		return fmt.Errorf("the hub's answer is not a rotation: %s", lmos.Truncate(string(body), 200))
	}
	_, err = fmt.Fprintf(c.stdout, "status list generation %d at %s: %d memberships moved; earlier credentials are revoked, members get new ones\n",
		rot.Generation, rot.StatusList, rot.Members)
	return err
}
