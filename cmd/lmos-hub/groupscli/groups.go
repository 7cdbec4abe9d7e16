// Package groupscli is `lmos-hub groups`: agent groups managed through a
// running hub's HTTP API (/api/groups, PROTOCOL §7). The hub holds the
// store's lock, so the CLI never opens the data directory itself.
package groupscli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
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

// Commands are the subcommands of `lmos-hub groups`; each answers --help.
var Commands = []string{"ls", "create", "add", "rm", "dissolve", "rotate-credentials"}

// DefaultHub is the hub URL without --hub or LMOS_HUB_URL.
const DefaultHub = cliargs.DefaultHub

var usageError = cliargs.Usagef

// Run runs `lmos-hub groups` with args (the arguments after "groups");
// getenv reads the environment (nil: none). It returns the exit status.
func Run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	name, code, ok := cliargs.Begin(args, stdout, stderr, "groups", Usage, "ls, create, add, rm, dissolve or rotate-credentials")
	if !ok {
		return code
	}
	c := &command{Client: cliargs.Client{Stdout: stdout, Stderr: stderr}}
	c.Hint = c.hint
	h, fs := cliargs.NewHubCommand("groups "+name, Usage, getenv)
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
		return cliargs.UsageErr(stderr, "groups", fmt.Sprintf("unknown command %q: use %s", name, strings.Join(Commands, ", ")))
	}
	return h.Run(&c.Client, args[1:], run)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// command is one invocation of `lmos-hub groups`.
type command struct{ cliargs.Client }

// hint tells what to do about a refusal.
func (c *command) hint(status int, _ string) string {
	return c.TokenHint(status, "changing groups", "operate")
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

func (c *command) list(asJSON bool) error {
	var groups []group
	if printed, err := c.Read("/api/groups", asJSON, &groups, "a list of groups"); printed || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
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
	status, _, resp, err := c.Do(http.MethodPost, "/api/groups", body)
	if err != nil {
		return err
	}
	if !cliargs.OK(status) {
		return c.Report(status, resp, "")
	}
	var g group
	if err := json.Unmarshal(resp, &g); err != nil || g.ID == "" {
		return fmt.Errorf("the hub's answer is not a group: %s", lmos.Truncate(string(resp), 200))
	}
	_, err = fmt.Fprintln(c.Stdout, "created", g.ID)
	return err
}

// members adds or removes each Thing; it goes on after a refusal and
// fails at the end.
func (c *command) members(gid string, things []string, add bool) error {
	method, verb := http.MethodPut, "added"
	if !add {
		method, verb = http.MethodDelete, "removed"
	}
	return c.Each(things, verb, func(thing string) (string, string) {
		return method, "/api/groups/" + url.PathEscape(gid) + "/members/" + url.PathEscape(thing)
	})
}

func (c *command) dissolve(gids []string) error {
	return c.Each(gids, "dissolved", func(gid string) (string, string) {
		return http.MethodDelete, "/api/groups/" + url.PathEscape(gid)
	})
}

// rotate starts a new status list generation (PROTOCOL §7.1).
func (c *command) rotate() error {
	status, _, body, err := c.Do(http.MethodPost, "/api/credentials/status/rotate", nil)
	if err != nil {
		return err
	}
	if !cliargs.OK(status) {
		if status == http.StatusForbidden {
			fmt.Fprintln(c.Stderr, "hint: rotating the status list needs an admin token")
		}
		return c.Report(status, body, "")
	}
	var rot struct {
		Generation int    `json:"generation"`
		Members    int    `json:"members"`
		StatusList string `json:"statusList"`
	}
	if err := json.Unmarshal(body, &rot); err != nil || rot.Generation < 1 {
		return fmt.Errorf("the hub's answer is not a rotation: %s", lmos.Truncate(string(body), 200))
	}
	_, err = fmt.Fprintf(c.Stdout, "status list generation %d at %s: %d memberships moved; earlier credentials are revoked, members get new ones\n",
		rot.Generation, rot.StatusList, rot.Members)
	return err
}
