// Package joincli is `lmos-hub join`: the joins parked for approval (join
// mode approve) listed, approved and denied — one by one or in bulk —
// through a running hub's HTTP API (/api/join, PROTOCOL §4.4). The hub
// holds the store's lock, so the CLI never opens the data directory.
package joincli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
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

// Commands are the subcommands of `lmos-hub join`; each answers --help.
var Commands = []string{"ls", "approve", "deny"}

// DefaultHub is the hub URL without --hub or LMOS_HUB_URL.
const DefaultHub = cliargs.DefaultHub

var usageError = cliargs.Usagef

// Run runs `lmos-hub join` with args (the arguments after "join"); getenv
// reads the environment (nil: none). It returns the exit status.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	name, code, ok := cliargs.Begin(args, stdout, stderr, "join", Usage, "ls, approve or deny")
	if !ok {
		return code
	}
	c := &command{Client: cliargs.Client{Stdout: stdout, Stderr: stderr}}
	c.Hint = c.hint
	h, fs := cliargs.NewHubCommand("join "+name, Usage, getenv)
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
		return cliargs.UsageErr(stderr, "join", fmt.Sprintf("unknown command %q: use %s", name, strings.Join(Commands, ", ")))
	}
	return h.Run(&c.Client, args[1:], run)
}

// command is one invocation of `lmos-hub join`.
type command struct{ cliargs.Client }

// hint tells what to do about a refusal: a 403 for one Thing (what) is
// about that Thing, not the token.
func (c *command) hint(status int, what string) string {
	if status == http.StatusForbidden && what != "" {
		return ""
	}
	return c.TokenHint(status, "join approval", "admin")
}

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
	var st struct {
		Mode string    `json:"mode"`
		List []pending `json:"list"`
	}
	if printed, err := c.Read("/api/join", asJSON, &st, "the join state"); printed || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
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
		fmt.Fprintf(c.Stderr, "note: the hub's join mode is %s: joins are parked only under approve\n", st.Mode)
	}
	return nil
}

// decide approves or denies each id; it goes on after a refusal and fails
// at the end.
func (c *command) decide(ids []string, verb, done string) error {
	return c.Each(ids, done, func(id string) (string, string) {
		return http.MethodPost, "/api/join/pending/" + url.PathEscape(id) + "/" + verb
	})
}

func (c *command) denyAll(filter map[string]any) error {
	status, _, body, err := c.Do(http.MethodPost, "/api/join/pending/deny", filter)
	if err != nil {
		return err
	}
	if !cliargs.OK(status) {
		return c.Report(status, body, "")
	}
	var res struct {
		Denied  []string `json:"denied"`
		Pending int      `json:"pending"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("the hub's answer is not a denial's result: %s", lmos.Truncate(string(body), 200))
	}
	for _, id := range res.Denied {
		fmt.Fprintln(c.Stdout, "denied", cliargs.Cell(id))
	}
	_, err = fmt.Fprintf(c.Stdout, "%d denied, %d still pending\n", len(res.Denied), res.Pending)
	return err
}
