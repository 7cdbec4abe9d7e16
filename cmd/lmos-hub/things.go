package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

const thingsUsage = `usage: lmos-hub things <command> [flags] [arguments]

Talks to a running hub over its HTTP directory API.

Commands:
  ls  [--query JSONPATH] [--json]   list the registered Things (ID, TYPE, TITLE, PRESENCE),
                                    or print the result of an RFC 9535 JSONPath query
  get ID [--raw]                    print a Thing Description (--raw: exactly as submitted)
  put FILE|-                        register or replace a Thing Description (- reads stdin)
  rm  ID...                         delete Things
  reset-credential ID...            delete the MQTT credential of Things whose agent lost it
                                    (the Thing stays; its agent's next join gets a new one)

Flags of every command:
  --hub URL         the hub (env LMOS_HUB_URL, default http://localhost:8080)
  --token TOKEN     admin token, needed for put, rm and reset-credential (env LMOS_HUB_TOKEN)
  --timeout D       give up on a request after D (default 10s)

Exit status: 0 ok, 1 request failed, 2 usage error.
`

// thingsCommands are the subcommands of `lmos-hub things`.
var thingsCommands = []string{"ls", "get", "put", "rm", "reset-credential"}

// thingsDefaultHub is the hub URL used without --hub or LMOS_HUB_URL.
const thingsDefaultHub = "http://localhost:8080"

// thingsPageLimit is the page size `things ls` asks for.
const thingsPageLimit = 100

// errThingsReported marks a failure already written to stderr (exit 1).
var errThingsReported = errors.New("reported")

// runThings implements `lmos-hub things ls|get|put|rm`. args are the
// arguments after "things". Exit 0 ok, 1 request failed, 2 usage error.
func runThings(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if len(args) == 0 {
		return cliargs.UsageErr(stderr, "things", "missing command: "+strings.Join(thingsCommands, ", "))
	}
	cmd, rest := args[0], args[1:]
	if cliargs.IsHelp(cmd) {
		fmt.Fprint(stdout, thingsUsage)
		return 0
	}
	switch cmd {
	case "ls":
		return thingsLs(newThingsCmd(cmd, stdout, stderr, getenv), rest)
	case "get":
		return thingsGet(newThingsCmd(cmd, stdout, stderr, getenv), rest)
	case "put":
		return thingsPut(newThingsCmd(cmd, stdout, stderr, getenv), rest, stdin)
	case "rm":
		return thingsRm(newThingsCmd(cmd, stdout, stderr, getenv), rest)
	case "reset-credential":
		return thingsResetCredential(newThingsCmd(cmd, stdout, stderr, getenv), rest)
	default:
		return cliargs.UsageErr(stderr, "things", fmt.Sprintf("unknown command %q: use %s", cmd, strings.Join(thingsCommands, ", ")))
	}
}

// thingsCmd is one `things` subcommand being parsed: the flags every
// subcommand shares and where it writes.
type thingsCmd struct {
	name           string
	fs             *flag.FlagSet
	hubURL, token  *string
	timeout        *time.Duration
	stdout, stderr io.Writer
	getenv         func(string) string
}

func newThingsCmd(name string, stdout, stderr io.Writer, getenv func(string) string) *thingsCmd {
	fs := flag.NewFlagSet("things "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &thingsCmd{
		name:    name,
		fs:      fs,
		hubURL:  fs.String("hub", "", ""),
		token:   fs.String("token", getenv("LMOS_HUB_TOKEN"), ""),
		timeout: fs.Duration("timeout", 10*time.Second, ""),
		stdout:  stdout,
		stderr:  stderr,
		getenv:  getenv,
	}
}

// parse parses the flags (the subcommand's own already defined) and returns
// the positional arguments; done with an exit code when there is nothing to
// run (help asked for, or a usage error).
func (t *thingsCmd) parse(rest []string) (pos []string, code int, done bool) {
	pos, err := cliargs.Parse(t.fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(t.stdout, thingsUsage)
		return nil, 0, true
	}
	if err != nil {
		return nil, t.usageErr("%v", err), true
	}
	return pos, 0, false
}

// usageErr writes a usage error and returns its exit code.
func (t *thingsCmd) usageErr(format string, a ...any) int {
	return cliargs.UsageErr(t.stderr, "things "+t.name, fmt.Sprintf(format, a...))
}

// checkCommon checks what every subcommand shares once its argument count
// is right: the timeout and, for the commands whose arguments are ids, that
// none is empty.
func (t *thingsCmd) checkCommon(ids []string) (code int, ok bool) {
	if *t.timeout <= 0 {
		return t.usageErr("--timeout must be a duration above 0 such as 10s, got %s", *t.timeout), false
	}
	for _, id := range ids {
		if id == "" {
			return t.usageErr("a Thing id must not be empty"), false
		}
	}
	return 0, true
}

// client resolves the hub URL (--hub, else LMOS_HUB_URL, else the default)
// and returns a client for it.
func (t *thingsCmd) client() (c *thingsClient, code int, ok bool) {
	hub := *t.hubURL
	if !flagWasSet(t.fs, "hub") {
		hub = t.getenv("LMOS_HUB_URL")
	}
	if hub == "" {
		hub = thingsDefaultHub
	}
	base, err := cliargs.HubURL(hub)
	if err != nil {
		return nil, t.usageErr("--hub: %v", err), false
	}
	return &thingsClient{
		base:   base,
		token:  *t.token,
		http:   &http.Client{Timeout: *t.timeout},
		stderr: t.stderr,
	}, 0, true
}

// finish turns the request's outcome into the exit code.
func (t *thingsCmd) finish(err error) int {
	if err != nil {
		if !errors.Is(err, errThingsReported) {
			fmt.Fprintln(t.stderr, "error:", err)
		}
		return 1
	}
	return 0
}

// thingsLs runs `things ls [--query EXPR] [--json]`.
func thingsLs(t *thingsCmd, rest []string) int {
	query := t.fs.String("query", "", "")
	asJSON := t.fs.Bool("json", false, "")
	pos, code, done := t.parse(rest)
	if done {
		return code
	}
	if len(pos) > 0 {
		return t.usageErr("things ls takes no arguments, got %q", pos[0])
	}
	if code, ok := t.checkCommon(nil); !ok {
		return code
	}
	if *query == "" && flagWasSet(t.fs, "query") {
		return t.usageErr("--query needs a JSONPath expression such as '$[*].title'")
	}
	c, code, ok := t.client()
	if !ok {
		return code
	}
	if *query != "" {
		return t.finish(c.search(t.stdout, *query))
	}
	return t.finish(c.list(t.stdout, *asJSON))
}

// thingsGet runs `things get ID [--raw]`.
func thingsGet(t *thingsCmd, rest []string) int {
	raw := t.fs.Bool("raw", false, "")
	pos, code, done := t.parse(rest)
	if done {
		return code
	}
	if len(pos) != 1 {
		return t.usageErr("things get takes exactly one Thing id, got %d arguments", len(pos))
	}
	if code, ok := t.checkCommon(pos); !ok {
		return code
	}
	c, code, ok := t.client()
	if !ok {
		return code
	}
	return t.finish(c.get(t.stdout, pos[0], *raw))
}

// thingsPut runs `things put FILE|-`.
func thingsPut(t *thingsCmd, rest []string, stdin io.Reader) int {
	pos, code, done := t.parse(rest)
	if done {
		return code
	}
	if len(pos) != 1 {
		return t.usageErr("things put takes exactly one file (or - for stdin), got %d arguments", len(pos))
	}
	// The argument is a file name, not an id: an empty one is left to put.
	if code, ok := t.checkCommon(nil); !ok {
		return code
	}
	c, code, ok := t.client()
	if !ok {
		return code
	}
	return t.finish(c.put(t.stdout, stdin, pos[0]))
}

// thingsRm runs `things rm ID...`.
func thingsRm(t *thingsCmd, rest []string) int {
	return thingsEach(t, rest, "rm", (*thingsClient).remove)
}

// thingsResetCredential runs `things reset-credential ID...`.
func thingsResetCredential(t *thingsCmd, rest []string) int {
	return thingsEach(t, rest, "reset-credential", (*thingsClient).resetCredentials)
}

// thingsEach runs a `things` command that takes one or more Thing ids.
func thingsEach(t *thingsCmd, rest []string, name string, run func(*thingsClient, io.Writer, []string) error) int {
	pos, code, done := t.parse(rest)
	if done {
		return code
	}
	if len(pos) == 0 {
		return t.usageErr("things %s needs at least one Thing id", name)
	}
	if code, ok := t.checkCommon(pos); !ok {
		return code
	}
	c, code, ok := t.client()
	if !ok {
		return code
	}
	return t.finish(run(c, t.stdout, pos))
}

func flagWasSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// thingsClient talks to one hub's directory API.
type thingsClient struct {
	base   *url.URL
	token  string
	http   *http.Client
	stderr io.Writer
}

// url builds the absolute URL of a path (already escaped) below the hub base.
func (c *thingsClient) url(escapedPath string) string {
	return strings.TrimRight(c.base.String(), "/") + escapedPath
}

// do sends one request. The token, when given, goes with every request:
// writes always need it and a hub with http.private needs it for reads.
func (c *thingsClient) do(method, rawURL, contentType, accept string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, rawURL, rd)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot build the request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	req.Header.Set("User-Agent", "lmos-hub-cli")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, c.transportError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, c.transportError(err)
	}
	return resp, data, nil
}

// transportError explains a failure to talk to the hub at all.
func (c *thingsClient) transportError(err error) error {
	hub := c.base.String()
	var uerr *url.Error
	inner := err
	if errors.As(err, &uerr) {
		inner = uerr.Err
	}
	var dnsErr *net.DNSError
	var nerr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach the hub at %s: is it running? (%v)", hub, inner)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("cannot reach the hub at %s: unknown host; check --hub or LMOS_HUB_URL (%v)", hub, inner)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Errorf("the hub at %s did not answer within %s (use --timeout to wait longer)", hub, c.http.Timeout)
	}
	return fmt.Errorf("cannot talk to the hub at %s: %v", hub, inner)
}

// report writes a non-2xx answer to stderr as
// `error: 400 Bad Request: <detail>` plus one line per validation error and
// a hint where one helps; it returns errThingsReported.
func (c *thingsClient) report(resp *http.Response, body []byte, what string) error {
	status := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	var msgs []string
	var p lmos.Problem
	mt := lmos.MediaType(resp.Header.Get("Content-Type"))
	isJSON := mt == lmos.MediaProblem || mt == lmos.MediaJSON || strings.HasSuffix(mt, "+json")
	if isJSON && json.Unmarshal(body, &p) == nil {
		if p.Title != "" && !strings.EqualFold(p.Title, http.StatusText(resp.StatusCode)) {
			msgs = append(msgs, p.Title)
		}
		if p.Detail != "" && p.Detail != p.Title {
			msgs = append(msgs, p.Detail)
		}
	} else if text := firstLine(body); text != "" {
		msgs = append(msgs, text)
	}
	line := "error: " + status
	if what != "" {
		line = "error: " + what + ": " + status
	}
	if len(msgs) > 0 {
		line += ": " + strings.Join(msgs, ": ")
	}
	fmt.Fprintln(c.stderr, line)
	for _, ve := range p.ValidationErrors {
		field := ve.Field
		if field == "" {
			field = "(document)"
		}
		fmt.Fprintf(c.stderr, "  %s: %s\n", field, ve.Description)
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		if c.token == "" {
			fmt.Fprintln(c.stderr, "hint: this needs an admin token: pass --token TOKEN or set LMOS_HUB_TOKEN (`lmos-hub token create` makes one)")
		} else {
			fmt.Fprintln(c.stderr, "hint: the hub did not accept the token given with --token or LMOS_HUB_TOKEN; check it, or make a new one with `lmos-hub token create`")
		}
	case http.StatusRequestEntityTooLarge:
		fmt.Fprintln(c.stderr, "hint: the document is larger than the hub accepts (its http.maxBodyBytes setting)")
	case http.StatusTooManyRequests:
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Fprintf(c.stderr, "hint: the hub limits writes per client; retry after %s s\n", ra)
		}
	}
	return errThingsReported
}

// firstLine returns the first line of a short non-JSON body, for errors.
func firstLine(body []byte) string {
	s := strings.TrimSpace(string(body))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func ok2xx(code int) bool { return code >= 200 && code < 300 }

// list prints every Thing, following Link rel="next" pages.
func (c *thingsClient) list(stdout io.Writer, asJSON bool) error {
	next := c.url("/things?offset=0&limit=" + strconv.Itoa(thingsPageLimit))
	seen := map[string]bool{}
	var things []json.RawMessage
	for next != "" {
		if seen[next] {
			return fmt.Errorf("the hub's next-page links loop at %s", next)
		}
		seen[next] = true
		resp, body, err := c.do(http.MethodGet, next, "", lmos.MediaLDJSON+", "+lmos.MediaJSON, nil)
		if err != nil {
			return err
		}
		if !ok2xx(resp.StatusCode) {
			return c.report(resp, body, "")
		}
		var page []json.RawMessage
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("the hub's answer to GET /things is not a JSON array: %v", err)
		}
		things = append(things, page...)
		next = ""
		if link := linkNext(resp.Header.Values("Link")); link != "" && len(page) > 0 {
			ref, err := url.Parse(link)
			if err != nil {
				return fmt.Errorf("the hub sent a bad next-page link %q: %v", link, err)
			}
			next = resp.Request.URL.ResolveReference(ref).String()
		}
	}
	if asJSON {
		if things == nil {
			things = []json.RawMessage{}
		}
		out, err := json.MarshalIndent(things, "", "  ")
		if err != nil {
			return fmt.Errorf("the hub sent invalid JSON: %v", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", out)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tTITLE\tPRESENCE")
	for _, raw := range things {
		var td struct {
			ID       string          `json:"id"`
			Type     json.RawMessage `json:"@type"`
			Title    string          `json:"title"`
			Presence struct {
				Status string `json:"status"`
			} `json:"lmos:presence"`
		}
		_ = json.Unmarshal(raw, &td) // a field of an unexpected type shows as "-"
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cliargs.Cell(td.ID), cliargs.Cell(typeString(td.Type)), cliargs.Cell(td.Title), cliargs.Cell(td.Presence.Status))
	}
	return tw.Flush()
}

// linkNext returns the target of the rel="next" link among Link headers.
func linkNext(headers []string) string {
	for _, h := range headers {
		for _, part := range splitLinks(h) {
			part = strings.TrimSpace(part)
			if !strings.HasPrefix(part, "<") {
				continue
			}
			end := strings.IndexByte(part, '>')
			if end < 0 {
				continue
			}
			target := part[1:end]
			for _, param := range strings.Split(part[end+1:], ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
					continue
				}
				for _, rel := range strings.Fields(strings.Trim(strings.TrimSpace(v), `"`)) {
					if strings.EqualFold(rel, "next") {
						return target
					}
				}
			}
		}
	}
	return ""
}

// splitLinks splits a Link header at the commas between link values,
// ignoring commas inside <…> and quoted strings.
func splitLinks(h string) []string {
	var parts []string
	inURL, inQuote, start := false, false, 0
	for i := 0; i < len(h); i++ {
		switch h[i] {
		case '<':
			if !inQuote {
				inURL = true
			}
		case '>':
			if !inQuote {
				inURL = false
			}
		case '"':
			if !inURL {
				inQuote = !inQuote
			}
		case ',':
			if !inURL && !inQuote {
				parts = append(parts, h[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, h[start:])
}

// typeString renders @type (a string or an array of strings).
func typeString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, ",")
	}
	return ""
}

// search prints the result of a JSONPath query.
func (c *thingsClient) search(stdout io.Writer, query string) error {
	resp, body, err := c.do(http.MethodGet, c.url("/search/jsonpath?query="+url.QueryEscape(query)), "", "application/json", nil)
	if err != nil {
		return err
	}
	if !ok2xx(resp.StatusCode) {
		return c.report(resp, body, "")
	}
	return printJSON(stdout, body)
}

// printJSON indents a JSON body for reading; other bodies go out as they are.
func printJSON(stdout io.Writer, body []byte) error {
	var buf bytes.Buffer
	if json.Indent(&buf, body, "", "  ") != nil {
		buf.Reset()
		buf.Write(body)
	}
	if !bytes.HasSuffix(buf.Bytes(), []byte("\n")) {
		buf.WriteByte('\n')
	}
	_, err := stdout.Write(buf.Bytes())
	return err
}

// get prints one Thing Description: the body exactly as the hub sends it.
func (c *thingsClient) get(stdout io.Writer, id string, raw bool) error {
	u := c.url(lmos.ThingPath(id))
	if raw {
		u += "?enriched=false"
	}
	resp, body, err := c.do(http.MethodGet, u, "", lmos.MediaTD+", "+lmos.MediaJSON, nil)
	if err != nil {
		return err
	}
	if !ok2xx(resp.StatusCode) {
		return c.report(resp, body, "")
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		body = append(body, '\n')
	}
	_, err = stdout.Write(body)
	return err
}

// maxTDFileBytes bounds what `things put` reads; the hub's own limit is lower.
const maxTDFileBytes = 64 << 20

// put registers the TD in file (or stdin for "-"): PUT /things/{id} when it
// has an id, POST /things when it is anonymous.
func (c *thingsClient) put(stdout io.Writer, stdin io.Reader, file string) error {
	var data []byte
	var err error
	name := file
	if file == "-" {
		name = "stdin"
		if stdin == nil {
			stdin = strings.NewReader("")
		}
		data, err = io.ReadAll(io.LimitReader(stdin, maxTDFileBytes+1))
	} else {
		var f *os.File
		f, err = os.Open(file)
		if err == nil {
			data, err = io.ReadAll(io.LimitReader(f, maxTDFileBytes+1))
			f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("cannot read the Thing Description: %w", err)
	}
	if len(data) > maxTDFileBytes {
		return fmt.Errorf("%s is larger than %d MiB; that is not a Thing Description", name, maxTDFileBytes>>20)
	}
	var td map[string]json.RawMessage
	if err := json.Unmarshal(data, &td); err != nil {
		if len(bytes.TrimSpace(data)) == 0 {
			return fmt.Errorf("%s is empty: expected a Thing Description (a JSON object)", name)
		}
		return fmt.Errorf("%s is not a Thing Description (a JSON object): %v", name, err)
	}
	if td == nil {
		return fmt.Errorf("%s is not a Thing Description (a JSON object): it is null", name)
	}
	idRaw, hasID := td["id"]
	if !hasID {
		resp, body, err := c.do(http.MethodPost, c.url("/things"), lmos.MediaTD, lmos.MediaJSON, data)
		if err != nil {
			return err
		}
		if !ok2xx(resp.StatusCode) {
			return c.report(resp, body, "")
		}
		id := idFromLocation(resp.Header.Get("Location"))
		if id == "" {
			_, err = fmt.Fprintln(stdout, "created (the hub sent no Location header)")
			return err
		}
		_, err = fmt.Fprintln(stdout, "created", id)
		return err
	}
	var id string
	if err := json.Unmarshal(idRaw, &id); err != nil || id == "" {
		return fmt.Errorf("%s: \"id\" must be a non-empty string (an absolute URI such as urn:uuid:…); leave it out to let the hub assign one", name)
	}
	resp, body, err := c.do(http.MethodPut, c.url(lmos.ThingPath(id)), lmos.MediaTD, lmos.MediaJSON, data)
	if err != nil {
		return err
	}
	if !ok2xx(resp.StatusCode) {
		return c.report(resp, body, "")
	}
	verb := "updated"
	if resp.StatusCode == http.StatusCreated {
		verb = "created"
	}
	_, err = fmt.Fprintln(stdout, verb, id)
	return err
}

// idFromLocation extracts the Thing id from "/things/<escaped id>" (or an
// absolute URL ending so).
func idFromLocation(loc string) string {
	if loc == "" {
		return ""
	}
	u, err := url.Parse(loc)
	if err != nil {
		return ""
	}
	p := u.EscapedPath()
	i := strings.LastIndex(p, "/things/")
	if i < 0 {
		return ""
	}
	id, err := url.PathUnescape(p[i+len("/things/"):])
	if err != nil {
		return ""
	}
	return id
}

// remove deletes each Thing; it goes on after a failure and fails at the end.
func (c *thingsClient) remove(stdout io.Writer, ids []string) error {
	failed := false
	for _, id := range ids {
		resp, body, err := c.do(http.MethodDelete, c.url(lmos.ThingPath(id)), "", "application/json", nil)
		if err != nil {
			// The hub is unreachable: the other ids would fail alike.
			if len(ids) > 1 {
				return fmt.Errorf("%s: %w", id, err)
			}
			return err
		}
		if !ok2xx(resp.StatusCode) {
			what := ""
			if len(ids) > 1 {
				what = id
			}
			c.report(resp, body, what)
			failed = true
			continue
		}
		fmt.Fprintln(stdout, "deleted", id)
	}
	if failed {
		return errThingsReported
	}
	return nil
}

// resetCredentials deletes each Thing's MQTT credential (DELETE
// /api/things/{id}/credential); it goes on after a failure and fails at the
// end.
func (c *thingsClient) resetCredentials(stdout io.Writer, ids []string) error {
	failed := false
	for _, id := range ids {
		resp, body, err := c.do(http.MethodDelete, c.url("/api"+lmos.ThingPath(id)+"/credential"), "", "application/json", nil)
		if err != nil {
			if len(ids) > 1 {
				return fmt.Errorf("%s: %w", id, err)
			}
			return err
		}
		if !ok2xx(resp.StatusCode) {
			what := ""
			if len(ids) > 1 {
				what = id
			}
			c.report(resp, body, what)
			failed = true
			continue
		}
		fmt.Fprintln(stdout, "credential reset", id, "(its agent's next join gets a new one)")
	}
	if failed {
		return errThingsReported
	}
	return nil
}
