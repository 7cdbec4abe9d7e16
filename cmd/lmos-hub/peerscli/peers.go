// Package peerscli is `lmos-hub peers`: the hubs a running hub is paired
// with, managed through its HTTP API (/api/peers, PROTOCOL §9
// "Federation").
package peerscli

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
)

// Usage is the help text of `lmos-hub peers`.
const Usage = `usage: lmos-hub peers <command> [flags] [arguments]

Manages the hubs this hub is paired with (its federation) over its HTTP API.
Pairing is an administrator's act on each hub: pair A with B on A, and B with
A on B. A hub's DID is in its /api/status and its directory TD (/.well-known/wot).

Commands:
  ls [--json]             list the paired hubs (DID, URL, STATE, THINGS, LAST ERROR)
  add URL --did DID       pair with the hub at URL whose key is DID (admin token)
  rm DID...               unpair hubs; their mirrored Things leave this hub (admin token)
  links [--json]          every link of the hub: the paired hubs, sync.url's push and pull, the MQTT
                          bridge (KIND, NAME, STATE, OUTBOX, LAG, THINGS, LAST SUCCESS, LAST ERROR)

Flags of every command:
  --hub URL         the hub (env LMOS_HUB_URL, default http://localhost:8080)
  --token TOKEN     an admin token, needed for add and rm (env LMOS_HUB_TOKEN)
  --timeout D       give up on a request after D (default 10s)

Exit status: 0 ok, 1 request failed, 2 usage error.
`

// Commands are the subcommands of `lmos-hub peers`; each answers --help.
var Commands = []string{"ls", "add", "rm", "links"}

// Run runs `lmos-hub peers` with args (the arguments after "peers");
// getenv reads the environment (nil: none). It returns the exit status.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	name, code, ok := cliargs.Begin(args, stdout, stderr, "peers", Usage, "ls, add, rm or links")
	if !ok {
		return code
	}
	c := &command{Client: cliargs.Client{Stdout: stdout, Stderr: stderr}}
	c.Hint = c.hint
	h, fs := cliargs.NewHubCommand("peers "+name, Usage, getenv)
	var run func(pos []string) error
	switch name {
	case "ls":
		asJSON := fs.Bool("json", false, "")
		run = func(pos []string) error {
			if len(pos) > 0 {
				return cliargs.Usagef("peers ls takes no arguments, got %q", pos[0])
			}
			return c.list(*asJSON)
		}
	case "links":
		asJSON := fs.Bool("json", false, "")
		run = func(pos []string) error {
			if len(pos) > 0 {
				return cliargs.Usagef("peers links takes no arguments, got %q", pos[0])
			}
			return c.links(*asJSON)
		}
	case "add":
		did := fs.String("did", "", "")
		run = func(pos []string) error {
			if len(pos) != 1 {
				return cliargs.Usagef("peers add takes the peer's URL (and --did DID)")
			}
			if *did == "" {
				return cliargs.Usagef("peers add needs --did DID: the peer's did:key, from its /api/status")
			}
			return c.add(pos[0], *did)
		}
	case "rm":
		run = func(pos []string) error {
			if len(pos) == 0 {
				return cliargs.Usagef("peers rm needs at least one DID")
			}
			return c.Each(pos, "unpaired", func(did string) (string, string) {
				return http.MethodDelete, "/api/peers/" + url.PathEscape(did)
			})
		}
	default:
		return cliargs.UsageErr(stderr, "peers", fmt.Sprintf("unknown command %q: use %s", name, strings.Join(Commands, ", ")))
	}
	return h.Run(&c.Client, args[1:], run)
}

// command is one invocation of `lmos-hub peers`.
type command struct{ cliargs.Client }

// hint tells what to do about a refusal.
func (c *command) hint(status int, _ string) string {
	return c.TokenHint(status, "pairing", "admin")
}

// peer is a peer as the hub shows it.
type peer struct {
	DID   string    `json:"did"`
	URL   string    `json:"url"`
	Added time.Time `json:"added"`
	Link  *struct {
		State     string `json:"state"`
		Things    int    `json:"things"`
		LastError string `json:"lastError"`
	} `json:"link"`
}

func (c *command) list(asJSON bool) error {
	var peers []peer
	if printed, err := c.Read("/api/peers", asJSON, &peers, "a list of peers"); printed || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DID\tURL\tSTATE\tTHINGS\tLAST ERROR")
	for _, p := range peers {
		state, things, lastErr := "-", "-", ""
		if p.Link != nil {
			state, things, lastErr = p.Link.State, fmt.Sprint(p.Link.Things), p.Link.LastError
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cliargs.Cell(p.DID), cliargs.Cell(p.URL), cliargs.Cell(state), things, cliargs.Cell(lastErr))
	}
	return tw.Flush()
}

func (c *command) add(peerURL, did string) error {
	status, _, resp, err := c.Do(http.MethodPost, "/api/peers", map[string]string{"url": peerURL, "did": did})
	if err != nil {
		return err
	}
	if !cliargs.OK(status) {
		return c.Report(status, resp, "")
	}
	var p peer
	if err := json.Unmarshal(resp, &p); err != nil || p.DID == "" {
		return fmt.Errorf("the hub's answer is not a peer: %s", cliargs.Cell(string(resp)))
	}
	verb := "paired"
	if status == http.StatusOK {
		verb = "already paired"
	}
	_, err = fmt.Fprintln(c.Stdout, verb, p.DID, p.URL)
	return err
}

// link is a link as /api/status shows it.
type link struct {
	Kind        string    `json:"kind"`
	Name        string    `json:"name"`
	State       string    `json:"state"`
	Outbox      int       `json:"outbox"`
	LagSeconds  float64   `json:"lagSeconds"`
	Things      int       `json:"things"`
	LastError   string    `json:"lastError"`
	LastSuccess time.Time `json:"lastSuccess"`
}

// links prints the links of /api/status: sync, pull, bridge and peers.
func (c *command) links(asJSON bool) error {
	status, _, body, err := c.Do(http.MethodGet, "/api/status", nil)
	if err != nil {
		return err
	}
	if !cliargs.OK(status) {
		return c.Report(status, body, "")
	}
	var st struct {
		Links []json.RawMessage `json:"links"`
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Links == nil {
		return fmt.Errorf("the hub's answer to GET /api/status has no links (a hub older than this command?)")
	}
	if asJSON {
		b, _ := json.Marshal(st.Links)
		return c.PrintJSON(b)
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tSTATE\tOUTBOX\tLAG\tTHINGS\tLAST SUCCESS\tLAST ERROR")
	for _, raw := range st.Links {
		var l link
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("the hub's answer to GET /api/status has a link that is not one: %w", err)
		}
		last := "never"
		if !l.LastSuccess.IsZero() {
			last = l.LastSuccess.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1fs\t%d\t%s\t%s\n", cliargs.Cell(l.Kind), cliargs.Cell(l.Name), cliargs.Cell(l.State),
			l.Outbox, l.LagSeconds, l.Things, last, cliargs.Cell(l.LastError))
	}
	return tw.Flush()
}
