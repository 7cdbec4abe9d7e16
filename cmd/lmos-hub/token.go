package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

const tokenUsage = `usage:
  lmos-hub token create [--name NAME] [--scope read|operate|admin] [--expires 30d] [--thing ID]
  lmos-hub token list
  lmos-hub token revoke ID

A token's scope is what it may do (default admin): read reads the directory,
properties and events; operate also writes properties and invokes actions,
and operates Things whose description requires security; admin also manages
the hub. --expires takes a lifetime (30d, 12h) or an RFC 3339 time.
--thing binds the token to a Thing: its holder speaks for that Thing on the
group channels it is a member of (WebSocket, HTTP SSE) and reads that Thing's
membership credentials, never manages groups, and has only the token's scope
otherwise (default read for a bound token).

Tokens are kept in the data directory (--data-dir, LMOS_HUB_DATA_DIR or LMOS_HUB_DATADIR, default
./lmos-data), which works while the hub is stopped. While it runs, pass
--hub URL and --token TOKEN (LMOS_HUB_URL, LMOS_HUB_TOKEN) to go through its API.
`

// tokenRow is a token as both the store and the hub API describe it.
type tokenRow struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Scope   string `json:"scope"`
	Created string `json:"created"`
	Expires string `json:"expires,omitempty"`
	Revoked string `json:"revoked,omitempty"`
	Token   string `json:"token,omitempty"`
	Thing   string `json:"thing,omitempty"`
}

// tokenCommands are the subcommands of `lmos-hub token`.
var tokenCommands = []string{"create", "list", "revoke"}

func runToken(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		return cliargs.UsageErr(stderr, "token", "missing command: create, list or revoke")
	}
	cmd := args[0]
	if cliargs.IsHelp(cmd) {
		fmt.Fprint(stdout, tokenUsage)
		return exitOK
	}
	want, known := map[string]int{"create": 0, "list": 0, "revoke": 1}[cmd]
	if !known {
		return cliargs.UsageErr(stderr, "token", fmt.Sprintf("unknown command %q: use create, list or revoke", cmd))
	}
	fs := flag.NewFlagSet("token "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dataDir := fs.String("data-dir", firstNonEmpty(getenv("LMOS_HUB_DATA_DIR"), getenv("LMOS_HUB_DATADIR"), app.DefaultConfig().DataDir), "")
	hubURL := fs.String("hub", getenv("LMOS_HUB_URL"), "")
	token := fs.String("token", getenv("LMOS_HUB_TOKEN"), "")
	name := fs.String("name", "", "")
	scope := fs.String("scope", "", "")
	thing := fs.String("thing", "", "")
	expires := fs.String("expires", "", "")
	pos, err := cliargs.Parse(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, tokenUsage)
		return exitOK
	}
	if err != nil {
		return cliargs.UsageErr(stderr, "token "+cmd, err.Error())
	}
	if len(pos) != want {
		return cliargs.UsageErr(stderr, "token "+cmd, fmt.Sprintf("token %s takes %d arguments, got %d", cmd, want, len(pos)))
	}
	t, closeTokens, err := openTokenAPI(*hubURL, *token, *dataDir)
	if errors.Is(err, store.ErrLocked) {
		fmt.Fprintf(stderr, "error: %v\nthe hub is running; use --hub URL --token TOKEN to manage tokens through it\n", err)
		return exitLocked
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	defer closeTokens()
	switch cmd {
	case "create":
		err = createToken(t, stdout, stderr, *name, *scope, *expires, *thing)
	case "list":
		err = listTokens(t, stdout)
	case "revoke":
		if err = t.revoke(pos[0]); err == nil {
			fmt.Fprintf(stdout, "revoked %s\n", pos[0])
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return exitFailure
	}
	return exitOK
}

// openTokenAPI is the hub's token API at hubURL, or else the tokens in
// dataDir opened directly (store.ErrLocked while the hub runs); release
// closes them.
func openTokenAPI(hubURL, token, dataDir string) (_ tokenAPI, release func() error, _ error) {
	if hubURL != "" {
		return &remoteTokens{base: strings.TrimRight(hubURL, "/"), token: token}, func() error { return nil }, nil
	}
	tokens, closeTokens, err := app.OpenTokens(dataDir)
	if err != nil {
		return nil, nil, err
	}
	return localTokens{tokens}, closeTokens, nil
}

// createToken creates a token and prints its secret, alone on stdout for
// scripts; a token bound to a Thing reads by default, any other is admin.
func createToken(t tokenAPI, stdout, stderr io.Writer, name, scope, expires, thing string) error {
	if scope == "" && thing != "" {
		scope = string(hub.ScopeRead)
	} else if scope == "" {
		scope = string(hub.ScopeAdmin)
	}
	row, err := t.create(name, scope, expires, thing)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", row.Token)
	fmt.Fprintf(stderr, "created token %s; the secret above is shown only once\n", row.ID)
	return nil
}

// listTokens prints the tokens as a table.
func listTokens(t tokenAPI, stdout io.Writer) error {
	rows, err := t.list()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	// THING last: scripts that read the columns before it by position
	// keep working.
	fmt.Fprintln(tw, "ID\tNAME\tSCOPE\tCREATED\tEXPIRES\tREVOKED\tTHING")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.Name), dash(r.Scope), r.Created, dash(r.Expires), dash(r.Revoked), dash(r.Thing))
	}
	_ = tw.Flush()
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

type tokenAPI interface {
	create(name, scope, expires, thing string) (tokenRow, error)
	list() ([]tokenRow, error)
	revoke(id string) error
}

type localTokens struct{ t *hub.Tokens }

func rowOf(t hub.Token) tokenRow {
	r := tokenRow{ID: t.ID, Name: t.Name, Scope: string(t.EffectiveScope()), Created: t.Created.UTC().Format(time.RFC3339), Thing: t.Thing}
	if !t.Revoked.IsZero() {
		r.Revoked = t.Revoked.UTC().Format(time.RFC3339)
	}
	if !t.Expires.IsZero() {
		r.Expires = t.Expires.UTC().Format(time.RFC3339)
	}
	return r
}

func (l localTokens) create(name, scope, expires, thing string) (tokenRow, error) {
	exp, err := hub.ParseExpiry(expires, time.Now())
	if err != nil {
		return tokenRow{}, err
	}
	secret, t, err := l.t.CreateBound(name, hub.Scope(scope), exp, thing)
	r := rowOf(t)
	r.Token = secret
	return r, err
}

func (l localTokens) list() ([]tokenRow, error) {
	all, err := l.t.List()
	rows := make([]tokenRow, len(all))
	for i, t := range all {
		rows[i] = rowOf(t)
	}
	return rows, err
}

func (l localTokens) revoke(id string) error { return l.t.Revoke(id) }

// remoteTokens manages tokens through a running hub's /api/tokens.
type remoteTokens struct{ base, token string }

func (r *remoteTokens) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		return fmt.Errorf("cannot build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the hub at %s: is it running? (%w)", r.base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var p struct{ Detail string }
		_ = json.Unmarshal(b, &p)
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized {
			hint = " (pass an admin token with --token or LMOS_HUB_TOKEN)"
		}
		return fmt.Errorf("%s: %s%s", resp.Status, p.Detail, hint)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func (r *remoteTokens) create(name, scope, expires, thing string) (row tokenRow, err error) {
	body := map[string]string{"name": name, "scope": scope, "expires": expires}
	if thing != "" {
		body["thing"] = thing
	}
	err = r.do(http.MethodPost, "/api/tokens", body, &row)
	return row, err
}

func (r *remoteTokens) list() (rows []tokenRow, err error) {
	err = r.do(http.MethodGet, "/api/tokens", nil, &rows)
	return rows, err
}

func (r *remoteTokens) revoke(id string) error {
	return r.do(http.MethodDelete, "/api/tokens/"+id, nil, nil)
}
