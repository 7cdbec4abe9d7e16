// Package mcpcli is `lmos-hub mcp`: the hub's MCP door (PROTOCOL §11) over
// stdio, for MCP clients that launch a command. It relays each JSON-RPC
// message a client writes on stdin to a running hub's /mcp (Streamable
// HTTP) and writes every message the hub sends back on stdout, one per
// line; the hub does the rest, so both transports behave alike.
package mcpcli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
)

// Usage is the help text of `lmos-hub mcp`.
const Usage = `usage: lmos-hub mcp [flags]

Serves the Model Context Protocol on stdin and stdout, for MCP clients that
launch a command (desktop assistants, IDEs), by relaying to a running hub's
/mcp. Every action of every Thing the token may invoke is a tool; see
docs/GUIDE.md "Language models (MCP)". A client's configuration, e.g.:

  {"command": "lmos-hub", "args": ["mcp", "--hub", "http://hub.local:8080"],
   "env": {"LMOS_HUB_TOKEN": "<token of scope operate>"}}

Flags:
  --hub URL         the hub (env LMOS_HUB_URL, default http://localhost:8080)
  --token TOKEN     a bearer token (env LMOS_HUB_TOKEN; none: anonymous)
  --timeout D       give up connecting to the hub after D (default 10s)
  --type TYPE       list only the tools of Things of this @type (e.g. Agent)
  --group GROUP     list only the tools of this group and its members
  --jsonpath QUERY  list only the tools of the Things this JSONPath selects

Exit status: 0 stdin ended, 1 the hub could not be reached, 2 usage error.
`

// maxMessage bounds one message read from stdin or the hub.
const maxMessage = 16 << 20

// maxListenBackoff is the longest wait before the notification stream is
// opened again.
const maxListenBackoff = 30 * time.Second

// Run runs `lmos-hub mcp` with args (the arguments after "mcp") until
// stdin ends; getenv reads the environment (nil: none).
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &cliargs.Client{Stdout: stdout, Stderr: stderr}
	h, fs := cliargs.NewHubCommand("mcp", Usage, getenv)
	var types multi
	fs.Var(&types, "type", "")
	group := fs.String("group", "", "")
	jsonpath := fs.String("jsonpath", "", "")
	return h.Run(c, args, func(pos []string) error {
		if len(pos) > 0 {
			return cliargs.Usagef("mcp takes no arguments, got %q", pos[0])
		}
		q := url.Values{}
		for _, t := range types {
			q.Add("type", t)
		}
		if *group != "" {
			q.Set("group", *group)
		}
		if *jsonpath != "" {
			q.Set("jsonpath", *jsonpath)
		}
		endpoint := c.Base + "/mcp"
		if len(q) > 0 {
			endpoint += "?" + q.Encode()
		}
		r := &relay{endpoint: endpoint, token: c.Token, out: stdout, log: stderr,
			client: &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
				DialContext: (&netDialer{timeout: c.HTTP.Timeout}).dial, ResponseHeaderTimeout: 0}}}
		return r.run(stdin)
	})
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// relay is one stdio session relayed to the hub.
type relay struct {
	endpoint, token string
	client          *http.Client
	log             io.Writer

	outMu sync.Mutex
	out   io.Writer

	mu        sync.Mutex
	init      []byte // the client's initialize, to open a session again
	session   string // Mcp-Session-Id the hub gave
	version   string // the negotiated protocol version, for MCP-Protocol-Version
	listenGen int    // the notification stream of the current session
	ending    bool   // stdin ended: no stream is opened any more

	// ctx bounds the requests, listenCtx the notification streams: when
	// stdin ends, the streams end at once and the calls in flight are
	// answered first (a client may pipe its requests and close stdin).
	wg, listens       sync.WaitGroup
	reopening         sync.Mutex
	ctx, listenCtx    context.Context
	cancel, endListen context.CancelFunc
}

// message is what the relay reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params struct {
		Name            string `json:"name"`
		URI             string `json:"uri"`
		ProtocolVersion string `json:"protocolVersion"`
		Meta            struct {
			ProtocolVersion string `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
	} `json:"params"`
	Result *struct {
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"result,omitempty"`
	batch []json.RawMessage // the ids of a batch's requests
}

func (r *relay) run(stdin io.Reader) error {
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.listenCtx, r.endListen = context.WithCancel(r.ctx)
	defer r.cancel()
	in := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, err := readLine(in)
		if len(bytes.TrimSpace(line)) > 0 {
			r.send(line)
		}
		if err != nil {
			break // stdin ended: the client is done
		}
	}
	r.mu.Lock()
	r.ending = true // no stream is opened from now on
	r.mu.Unlock()
	r.endListen()
	r.wg.Wait() // the calls: one may open a session again, not a stream
	r.listens.Wait()
	r.cancel()
	r.closeSession()
	return nil
}

// readLine reads one line of at most maxMessage bytes.
func readLine(in *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := in.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxMessage {
			// Drop the rest of an oversized line; the hub would refuse it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = in.ReadSlice('\n')
			}
			return []byte(`{"jsonrpc":"2.0","method":"lmos/oversized"}`), err
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// send posts one message to the hub, in its own goroutine: a long call or
// a listen request must not hold up the others.
func (r *relay) send(line []byte) {
	if trimmed := bytes.TrimSpace(line); trimmed[0] == '[' {
		// A batch (revisions before 2025-06-18): relayed as it is, in
		// order; the hub answers it as one, or its refusal answers each
		// request in it.
		var batch []message
		if err := json.Unmarshal(trimmed, &batch); err != nil {
			r.write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: a batch must be an array of JSON-RPC messages"}}`))
			return
		}
		m := message{Method: "batch"}
		for _, b := range batch {
			if len(b.ID) > 0 && b.Method != "" {
				m.batch = append(m.batch, b.ID)
			}
		}
		r.post(r.ctx, trimmed, m)
		return
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		r.write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the line is not JSON"}}`))
		return
	}
	if m.Method == "lmos/oversized" {
		r.write([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"the message is larger than %d bytes"}}`, maxMessage)))
		return
	}
	if v := m.Params.Meta.ProtocolVersion; v != "" {
		r.mu.Lock()
		r.version = v // 2026-07-28 and later name it in each request
		r.mu.Unlock()
	}
	switch {
	case m.Method == "initialize":
		r.mu.Lock()
		r.init = append([]byte(nil), line...)
		r.mu.Unlock()
		// The session the answer opens is needed by what follows.
		r.post(r.ctx, line, m)
		return
	case len(m.ID) == 0 || m.Method == "":
		// A notification or an answer to the hub: the hub acknowledges
		// it at once, and it must reach the hub in its turn (a
		// cancellation after the request it cancels).
		r.post(r.ctx, line, m)
		return
	}
	// A request runs as long as it runs, beside the others; the next line
	// is read once this one has reached the hub.
	ctx, wg := r.ctx, &r.wg
	if m.Method == "subscriptions/listen" {
		ctx, wg = r.listenCtx, &r.listens
	}
	sent := make(chan struct{})
	var once sync.Once
	wrote := func() { once.Do(func() { close(sent) }) }
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote() }})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer wrote() // also when it failed before it was written
		r.post(ctx, line, m)
	}()
	<-sent
}

func (r *relay) headers(req *http.Request) {
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	req.Header.Set("User-Agent", "lmos-hub-mcp")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	if r.version != "" {
		req.Header.Set("Mcp-Protocol-Version", r.version)
	}
}

func (r *relay) post(ctx context.Context, body []byte, m message) {
	resp, session, err := r.do(ctx, body, m)
	if err != nil {
		r.fail(m, 0, fmt.Sprintf("cannot reach the hub at %s: %v", r.endpoint, err))
		return
	}
	if resp.StatusCode == http.StatusNotFound && session != "" && m.Method != "initialize" {
		// The hub forgot the session (it restarted, or the session sat
		// idle past mcp.sessionTimeout): open another and send again.
		resp.Body.Close()
		if !r.reopen(session) {
			r.fail(m, 0, "the hub forgot this session and a new one could not be opened")
			return
		}
		if resp, _, err = r.do(ctx, body, m); err != nil {
			r.fail(m, 0, fmt.Sprintf("cannot reach the hub at %s: %v", r.endpoint, err))
			return
		}
	}
	defer resp.Body.Close()
	if m.Method == "initialize" {
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			r.mu.Lock()
			r.session = id
			r.mu.Unlock()
		}
	}
	switch ct := resp.Header.Get("Content-Type"); {
	case resp.StatusCode == http.StatusAccepted:
	case strings.HasPrefix(ct, "text/event-stream"):
		answered, err := r.events(resp.Body, m.Method == "initialize", m)
		if !answered && ctx.Err() == nil {
			// The client would wait for an answer that cannot come.
			why := "the stream ended"
			if err != nil {
				why = err.Error()
			}
			r.fail(m, 0, fmt.Sprintf("the hub's event stream for this request ended before the answer (%s); the request may or may not have taken effect", why))
		}
	case resp.StatusCode >= 300:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		r.refused(m, resp.StatusCode, b)
	default:
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
		if err != nil {
			r.fail(m, 0, "reading the hub's answer: "+err.Error())
			return
		}
		r.forward(b, m.Method == "initialize")
	}
}

// do posts one message with the session's headers and returns the answer
// and the session it was sent in.
func (r *relay) do(ctx context.Context, body []byte, m message) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	r.headers(req)
	if m.Method == "initialize" {
		req.Header.Del("Mcp-Session-Id")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	standardHeaders(req.Header, m)
	resp, err := r.client.Do(req)
	return resp, req.Header.Get("Mcp-Session-Id"), err
}

// reopen opens a new session in place of stale with the client's own
// initialize, unseen by the client, and its notification stream; false
// when that failed. Calls that found the same stale session wait for one
// reopening.
func (r *relay) reopen(stale string) bool {
	r.reopening.Lock()
	defer r.reopening.Unlock()
	r.mu.Lock()
	current, init := r.session, r.init
	r.mu.Unlock()
	if current != stale {
		return current != "" // another call reopened it
	}
	if init == nil {
		return false
	}
	resp, _, err := r.do(r.ctx, init, message{Method: "initialize"})
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxMessage)) // the client has its answer
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		return false
	}
	r.mu.Lock()
	r.session = id
	r.mu.Unlock()
	if resp, _, err := r.do(r.ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), message{Method: "notifications/initialized"}); err == nil {
		resp.Body.Close()
	}
	r.startListen()
	fmt.Fprintln(r.log, "lmos-hub mcp: the hub forgot the session (a restart, or idle past mcp.sessionTimeout); a new one is open")
	return true
}

// forward writes one message of the hub's; the answer to initialize also
// tells the version, and opens the session's notification stream. It
// returns the id of the message when it is an answer (nil otherwise).
func (r *relay) forward(b []byte, initialize bool) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		fmt.Fprintf(r.log, "lmos-hub mcp: the hub sent a message that is not JSON: %.200s\n", b)
		return nil
	}
	var answer struct {
		ID            json.RawMessage `json:"id"`
		Method        string          `json:"method"`
		Result, Error json.RawMessage
	}
	_ = json.Unmarshal(buf.Bytes(), &answer)
	if initialize {
		var m message
		if json.Unmarshal(buf.Bytes(), &m) == nil && m.Result != nil && m.Result.ProtocolVersion != "" {
			r.mu.Lock()
			r.version = m.Result.ProtocolVersion
			session := r.session
			r.mu.Unlock()
			if session != "" {
				r.startListen()
			}
		}
	}
	r.write(buf.Bytes())
	if answer.Method == "" && (answer.Result != nil || answer.Error != nil) {
		return answer.ID
	}
	return nil
}

// events forwards the messages of an event stream and reports whether
// one of them answered the request m (whether the stream ended early: the
// hub went away, a proxy cut it, the hub closed it to be resumed, which
// the relay does not do).
func (r *relay) events(body io.Reader, initialize bool, m message) (answered bool, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxMessage)
	var data []byte
	want := compact(m.ID)
	deliver := func() {
		if id := r.forward(data, initialize); id != nil && want != "" && compact(id) == want {
			answered = true
		}
		data = data[:0]
	}
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				deliver()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
	if len(data) > 0 {
		deliver()
	}
	return answered, sc.Err()
}

// compact is a JSON value in compact form ("" for none or null).
func compact(v json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, v) != nil || buf.String() == "null" {
		return ""
	}
	return buf.String()
}

// startListen opens the current session's notification stream; the
// stream of an older session ends by itself.
func (r *relay) startListen() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ending {
		return
	}
	r.listenGen++
	r.listens.Add(1) // under mu: never after run began to wait
	go r.listen(r.listenGen)
}

// listen holds the session's GET stream open for the hub's notifications
// (a tool list that changed), opening it again when it drops, until stdin
// ends, the hub refuses it, or another session replaced this one.
func (r *relay) listen(gen int) {
	defer r.listens.Done()
	current := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.listenGen == gen
	}
	fails := 0
	for r.listenCtx.Err() == nil && current() {
		req, err := http.NewRequestWithContext(r.listenCtx, http.MethodGet, r.endpoint, nil)
		if err != nil {
			return
		}
		r.headers(req)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := r.client.Do(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			fails = 0
			_, _ = r.events(resp.Body, false, message{})
			resp.Body.Close()
		} else {
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusNotFound {
					// The hub forgot the session: a new one brings
					// its own stream.
					r.reopen(req.Header.Get("Mcp-Session-Id"))
					return
				}
				if resp.StatusCode == http.StatusMethodNotAllowed {
					return // no stream here
				}
			}
			fails++
		}
		// Until stdin ends, whatever the hub answers: a hub that is
		// away for a while keeps the session.
		select {
		case <-r.listenCtx.Done():
		case <-time.After(min(time.Duration(fails)*time.Second, maxListenBackoff)):
		}
	}
}

// standardHeaders sets the headers 2026-07-28 requires of a request
// beside its body: its method, and the name it is about.
func standardHeaders(h http.Header, m message) {
	if h.Get("Mcp-Protocol-Version") < "2026-07-28" || m.Method == "" || len(m.ID) == 0 {
		return
	}
	h.Set("Mcp-Method", m.Method)
	name := ""
	switch m.Method {
	case "tools/call", "prompts/get":
		name = m.Params.Name
	case "resources/read":
		name = m.Params.URI
	}
	if name != "" {
		h.Set("Mcp-Name", headerValue(name))
	}
}

// headerValue is v as a header value: as it is when it is printable
// ASCII without edge spaces, else in the protocol's base64 form.
func headerValue(v string) string {
	plain := strings.TrimSpace(v) == v
	for i := 0; i < len(v) && plain; i++ {
		plain = v[i] >= 0x20 && v[i] < 0x7f
	}
	if plain {
		return v
	}
	return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(v)) + "?="
}

// refused answers a request the hub refused with an HTTP error.
func (r *relay) refused(m message, status int, body []byte) {
	var e struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Detail string `json:"detail"`
	}
	msg := strings.TrimSpace(string(body))
	code := -32000
	if json.Unmarshal(body, &e) == nil {
		switch {
		case e.Error != nil:
			msg, code = e.Error.Message, e.Error.Code
		case e.Detail != "":
			msg = e.Detail
		}
	}
	r.fail(m, code, fmt.Sprintf("the hub answered %d %s: %s", status, http.StatusText(status), msg))
}

// fail answers request m with a JSON-RPC error (a notification's failure
// goes to stderr only).
func (r *relay) fail(m message, code int, msg string) {
	if code == 0 {
		code = -32000
	}
	ids := m.batch
	if len(m.ID) > 0 && string(m.ID) != "null" {
		ids = []json.RawMessage{m.ID}
	}
	if len(ids) == 0 {
		fmt.Fprintf(r.log, "lmos-hub mcp: %s: %s\n", m.Method, msg)
		return
	}
	for _, id := range ids {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
		r.write(b)
	}
}

func (r *relay) write(b []byte) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	_, _ = r.out.Write(append(b, '\n'))
}

// closeSession ends the hub's session, as a client that is done should.
func (r *relay) closeSession() {
	r.mu.Lock()
	session := r.session
	r.mu.Unlock()
	if session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.endpoint, nil)
	if err != nil {
		return
	}
	r.headers(req)
	if resp, err := r.client.Do(req); err == nil {
		resp.Body.Close()
	}
}
