package mcpdoor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"
)

// Defaults of Config.
const (
	DefaultMaxListed      = 38
	DefaultMaxCalls       = 32
	DefaultMaxListeners   = 64
	DefaultMaxSessions    = 256
	DefaultSessionTimeout = time.Hour
	DefaultCallTimeout    = 30 * time.Second
	DefaultMaxBodyBytes   = 256 << 10
	DefaultSyncInterval   = 100 * time.Millisecond
)

// syncBurst is how many readings of the directory follow changes at once
// before SyncInterval spaces them.
const syncBurst = 10

// statelessVersion is the first revision without sessions: its requests
// go to the stateless handler.
const statelessVersion = "2026-07-28"

// refHeader carries, from ServeHTTP to the SDK's handlers, the reference
// of the caller ServeHTTP resolved: the SDK passes a request's header to
// its handlers (RequestExtra.Header) and nothing else of it. ServeHTTP
// overwrites whatever a client sent in it.
const refHeader = "Lmos-Mcp-Caller"

// Config configures a Door.
type Config struct {
	Registry *hub.Registry
	Router   *hub.Router
	// Access is the hub's policy (nil: open).
	Access *hub.Access
	// GroupActions runs group actions (nil: groups have no tools).
	GroupActions *hub.GroupActions
	// MaxListed is how many Thing and group tools tools/list shows at
	// most: with more, it lists only find_tools and call_tool (mcp.maxTools).
	MaxListed int
	// MaxCalls bounds the tool calls running at once (mcp.maxCalls).
	MaxCalls int
	// MaxListeners bounds the open notification streams: GET streams of
	// sessions and subscriptions/listen requests (mcp.maxListeners).
	MaxListeners int
	// MaxSessions bounds the sessions of clients of revisions before
	// 2026-07-28 (mcp.maxSessions); SessionTimeout closes idle ones.
	MaxSessions    int
	SessionTimeout time.Duration
	// CallTimeout bounds one tool call (http.proxyTimeout).
	CallTimeout time.Duration
	// MaxBodyBytes bounds a request's body (http.maxBodyBytes).
	MaxBodyBytes int64
	// SyncInterval spaces the door's readings of the directory: the
	// first syncBurst changes after a quiet moment are read at once, a
	// longer burst (a LAN's Things joining after a power cut) once per
	// interval, since each reading goes over every Thing.
	SyncInterval time.Duration
	Version      string
	Logger       *slog.Logger
}

// Door is the MCP door: an http.Handler for /mcp.
type Door struct {
	cfg       Config
	reg       *hub.Registry
	access    *hub.Access
	log       *slog.Logger
	srv       *mcp.Server
	stateful  http.Handler
	stateless http.Handler

	calls     chan struct{}
	listening atomic.Int64
	opening   sync.Mutex // one new session at a time
	stats     counters
	callers   sync.Map // refHeader value → *caller

	mu  sync.RWMutex
	cat *catalog
	// specs caches what clients see of the tools of recently used Things.
	specs specCache
	gone  map[string]string // names of tools that went, and why
	// synced is the registry revision the catalog reflects.
	synced atomic.Uint64
	syncs  atomic.Uint64 // how many times it read the directory
	ready  chan struct{} // closed after the first sync
	once   sync.Once
}

// caller is who sends a request and the filter its URL sets.
type caller struct {
	p      hub.Principal
	filter filter
}

// New returns a door over the registry; Run keeps its tools in step with
// the directory.
func New(cfg Config) *Door {
	if cfg.MaxListed <= 0 {
		cfg.MaxListed = DefaultMaxListed
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	if cfg.MaxListeners <= 0 {
		cfg.MaxListeners = DefaultMaxListeners
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Access == nil {
		cfg.Access = hub.OpenAccess()
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	d := &Door{cfg: cfg, reg: cfg.Registry, access: cfg.Access, log: cfg.Logger,
		calls: make(chan struct{}, cfg.MaxCalls), cat: &catalog{}, gone: map[string]string{}, ready: make(chan struct{}),
		specs: specCache{max: max(minCachedThings, cfg.MaxListed)}}
	d.srv = mcp.NewServer(&mcp.Implementation{Name: "lmos-hub", Title: "LMOS hub", Version: version}, &mcp.ServerOptions{
		Instructions: "Tools of the agents and Things on this LAN's LMOS hub. If the tool you need is not listed, " +
			"search with find_tools and call it by name, or with call_tool by Thing id and action.",
		Logger:       cfg.Logger,
		HasResources: true,
	})
	d.srv.AddReceivingMiddleware(d.middleware)
	d.addMetaTools()
	d.addResourceTemplates()
	opts := mcp.StreamableHTTPOptions{
		Logger:              cfg.Logger,
		SessionTimeout:      cfg.SessionTimeout,
		MaxRequestBodyBytes: cfg.MaxBodyBytes,
		// The hub checks Host (every door) and Origin (web) itself, on
		// every address, not only on loopback.
		DisableLocalhostProtection: true,
	}
	getServer := func(*http.Request) *mcp.Server { return d.srv }
	d.stateful = mcp.NewStreamableHTTPHandler(getServer, &opts)
	opts.Stateless = true
	d.stateless = mcp.NewStreamableHTTPHandler(getServer, &opts)
	return d
}

// Ready is closed once the door has read the directory.
func (d *Door) Ready() <-chan struct{} { return d.ready }

// Synced is the registry revision the tools reflect.
func (d *Door) Synced() uint64 { return d.synced.Load() }

// Run keeps the tools in step with the directory until ctx ends.
func (d *Door) Run(ctx context.Context) error {
	for {
		sub, _, err := d.reg.Subscribe(0, false)
		if err != nil {
			return fmt.Errorf("mcp: following the directory: %w", err)
		}
		d.sync()
		if !d.follow(ctx, sub) {
			sub.Cancel()
			return nil
		}
		// Dropped (fell behind) or the registry closed: read it all again.
		if d.reg.Err() != nil {
			return nil
		}
	}
}

// follow syncs after each batch of events, syncBurst at once and then at
// most once per SyncInterval: events that come sooner wait for their turn
// and are read together. False once ctx ended.
func (d *Door) follow(ctx context.Context, sub *hub.Subscription) bool {
	lim := rate.NewLimiter(rate.Every(d.cfg.SyncInterval), syncBurst)
	for {
		select {
		case <-ctx.Done():
			return false
		case _, ok := <-sub.C:
			if !ok {
				return true
			}
		}
		if wait := lim.Reserve().Delay(); wait > 0 {
			if open, alive := d.await(ctx, sub, wait); !open || !alive {
				return alive
			}
		}
	drain:
		for {
			select {
			case _, ok := <-sub.C:
				if !ok {
					break drain
				}
			default:
				break drain
			}
		}
		d.sync()
	}
}

// await takes sub's events for wait (the subscription must not fall
// behind meanwhile); open is false if sub closed, alive false if ctx
// ended.
func (d *Door) await(ctx context.Context, sub *hub.Subscription, wait time.Duration) (open, alive bool) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, false
		case _, ok := <-sub.C:
			if !ok {
				return false, true
			}
		case <-t.C:
			return true, true
		}
	}
}

// catalog returns the current catalog.
func (d *Door) catalog() *catalog {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.cat
}

// sync rebuilds the catalog from the registry's summaries and, when a
// tool or a Thing changed, has the SDK server announce it.
func (d *Door) sync() {
	rev := d.reg.Revision()
	things, _ := d.reg.List(0, 0)
	prev := d.catalog()
	next := &catalog{things: make(map[string]*entry, len(things)), ofThing: map[string][]string{}}
	// tools: a Thing with actions came, went or changed its description
	// (its tools' schemas and descriptions with it); things: a Thing came,
	// went or took another title (the resources).
	tools, resources := false, len(things) != len(prev.things)
	for _, t := range things {
		old := prev.things[t.ID]
		if old != nil && old.sum == t.Summary {
			next.things[t.ID] = old
			continue
		}
		e := entryOf(t)
		next.things[t.ID] = e
		tools = tools || len(e.actions) > 0 || old != nil && len(old.actions) > 0
		resources = resources || old == nil || old.title != e.title
	}
	for id, old := range prev.things {
		if next.things[id] == nil && len(old.actions) > 0 {
			tools = true
		}
	}
	var groups map[string][]string
	if d.cfg.GroupActions != nil {
		groups = groupActions(d.reg.Groups(), next.things)
	}
	next.byName = nameAll(next.things, groups)
	next.names = sortedNames(next.byName)
	for _, name := range next.names {
		r := next.byName[name]
		if r.thing != "" {
			next.ofThing[r.thing] = append(next.ofThing[r.thing], name)
		}
		if old := prev.byName[name]; old == nil || *old != *r {
			tools = true
		}
	}
	d.mu.Lock()
	for _, name := range prev.names {
		if next.byName[name] == nil {
			tools = true
			d.gone[name] = goneReason(prev.byName[name], next)
		}
	}
	for _, name := range next.names {
		delete(d.gone, name)
	}
	if len(d.gone) > maxGone {
		d.gone = map[string]string{} // forget old names rather than grow
	}
	d.cat = next
	d.mu.Unlock()
	if tools {
		d.announceTools()
	}
	if resources {
		d.announceResources()
	}
	d.synced.Store(rev)
	d.syncs.Add(1)
	d.once.Do(func() { close(d.ready) })
}

// announceTools has the SDK server send notifications/tools/list_changed
// to every session and listen stream (within its 10 ms debounce). The
// Thing tools are the door's (middleware answers tools/list and
// tools/call), not the SDK server's: the SDK announces a change when a
// tool is added, so find_tools is added again, unchanged.
func (d *Door) announceTools() {
	d.srv.AddTool(findToolsTool(d.cfg.MaxListed), d.findTools)
}

// announceResources sends notifications/resources/list_changed the same
// way, through the TD resources' template.
func (d *Door) announceResources() {
	d.srv.AddResourceTemplate(thingTemplate, d.readResource)
}

// maxGone bounds the names of gone tools the door explains.
const maxGone = 4096

// goneReason says why a tool of prev is no longer in next.
func goneReason(r *ref, next *catalog) string {
	switch {
	case r.group != "":
		return fmt.Sprintf("the tool was group %q's action %q; the group or the action is gone. Search with find_tools", r.group, r.action)
	case next.things[r.thing] == nil:
		return fmt.Sprintf("the tool was action %q of Thing %q, which left the hub. Search with find_tools", r.action, r.thing)
	}
	for _, name := range next.ofThing[r.thing] {
		if n := next.byName[name]; n.action == r.action {
			return fmt.Sprintf("the tool of action %q of Thing %q is now named %q", r.action, r.thing, name)
		}
	}
	return fmt.Sprintf("Thing %q no longer has action %q. Search with find_tools", r.thing, r.action)
}

// ServeHTTP serves /mcp. The principal is the one the hub's HTTP server
// put in the request's context (hub.ContextWithPrincipal); without one,
// the request is anonymous.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := hub.PrincipalFrom(r.Context())
	if !ok {
		p = hub.AnonymousFrom(r.RemoteAddr)
	}
	// A client that may not read the directory may use nothing here:
	// refused before it holds a session or a stream (access.anonymous
	// none), as every door refuses it.
	if err := d.access.Allow(p, hub.OpReadDirectory, nil); err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lmos-hub"`)
		d.refuse(w, hub.ProblemOf(err).Status, -32000, hub.ProblemOf(err).Detail)
		return
	}
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		d.refuse(w, http.StatusBadRequest, -32602, err.Error())
		return
	}
	stateless := r.Header.Get("Mcp-Protocol-Version") >= statelessVersion
	method, status, err := d.peek(w, r)
	if err == nil && !stateless && method == "subscriptions/listen" {
		// A session's notifications come on its GET stream; the SDK
		// would hold this request's handler until the session ends.
		status, err = http.StatusBadRequest, errors.New("subscriptions/listen is a method of 2026-07-28 and later; a session listens on its GET stream")
	}
	if err != nil {
		code := -32600
		if status == http.StatusBadRequest && strings.HasPrefix(err.Error(), "parse error") {
			code = -32700
		}
		d.refuse(w, status, code, err.Error())
		return
	}
	if r.Method == http.MethodGet || method == "subscriptions/listen" {
		if d.listening.Add(1) > int64(d.cfg.MaxListeners) {
			d.listening.Add(-1)
			w.Header().Set("Retry-After", "10")
			d.refuse(w, http.StatusServiceUnavailable, -32000,
				fmt.Sprintf("too many notification streams are open on this hub (mcp.maxListeners: %d); try again later", d.cfg.MaxListeners))
			return
		}
		defer d.listening.Add(-1)
	}
	if !stateless && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		// A new session: one at a time, so that initializes at once
		// cannot all pass the check before any of them is a session
		// (an initialize does no work of a Thing's: it is quick).
		d.opening.Lock()
		defer d.opening.Unlock()
		if d.sessions() >= d.cfg.MaxSessions {
			w.Header().Set("Retry-After", "10")
			d.refuse(w, http.StatusServiceUnavailable, -32000,
				fmt.Sprintf("too many MCP sessions are open on this hub (mcp.maxSessions: %d); close one or try again later", d.cfg.MaxSessions))
			return
		}
	}
	ref := newRef()
	d.callers.Store(ref, &caller{p: p, filter: f})
	defer d.callers.Delete(ref)
	r.Header.Set(refHeader, ref)
	if stateless {
		d.stateless.ServeHTTP(w, r)
		return
	}
	d.stateful.ServeHTTP(w, r)
}

// peek reads a POST's body (bounded by MaxBodyBytes), puts it back for
// the SDK, and returns the method of the message it holds: what is not
// JSON, or not a JSON-RPC message, is refused here with the protocol's
// error rather than the SDK's plain text.
func (d *Door) peek(w http.ResponseWriter, r *http.Request) (string, int, error) {
	if r.Method != http.MethodPost {
		return "", 0, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is larger than %d bytes (http.maxBodyBytes)", d.cfg.MaxBodyBytes)
		}
		return "", http.StatusBadRequest, fmt.Errorf("cannot read the request body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !json.Valid(body) {
		return "", http.StatusBadRequest, errors.New("parse error: the body is not JSON")
	}
	body = bytes.TrimSpace(body)
	invalid := errors.New("invalid request: the body must be a JSON-RPC message (an object with a method, a result or an error)")
	if len(body) > 0 && body[0] == '[' {
		// A batch (revisions before 2025-06-18): each must be a message.
		var batch []json.RawMessage
		if json.Unmarshal(body, &batch) != nil || len(batch) == 0 {
			return "", http.StatusBadRequest, invalid
		}
		for _, m := range batch {
			if _, ok := rpcMethod(m); !ok {
				return "", http.StatusBadRequest, invalid
			}
		}
		return "", 0, nil
	}
	method, ok := rpcMethod(body)
	if !ok {
		return "", http.StatusBadRequest, invalid
	}
	return method, 0, nil
}

// rpcMethod reads a JSON-RPC message's method; false when b is not one.
// Its keys are read as the SDK reads them, case-sensitively: a second
// "Method" must not make the door see another method than the SDK (a
// listen stream the door does not count), so any member named like one of
// the protocol's in another case, or twice, is refused.
func rpcMethod(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	method, seen := "", map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		key, isKey := tok.(string)
		if err != nil || !isKey {
			return "", false
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return "", false
		}
		lower := strings.ToLower(key)
		switch lower {
		case "method", "result", "error", "id", "params", "jsonrpc":
			if key != lower || seen[lower] {
				return "", false
			}
			seen[lower] = true
		}
		if key == "method" && json.Unmarshal(v, &method) != nil {
			return "", false
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF { // nothing after the object
		return "", false
	}
	return method, method != "" || seen["result"] || seen["error"]
}

// Sessions counts the open sessions (of revisions before 2026-07-28; a
// stateless request's lives as long as the request).
func (d *Door) Sessions() int { return d.sessions() }

// sessions counts the server's sessions.
func (d *Door) sessions() int {
	n := 0
	for ss := range d.srv.Sessions() {
		if ss.ID() != "" { // a stateless request's session has none
			n++
		}
	}
	return n
}

func newRef() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// callerOf is who sent an SDK request (anonymous, with no filter, when
// the request did not come through ServeHTTP).
func (d *Door) callerOf(extra *mcp.RequestExtra) *caller {
	if extra != nil && extra.Header != nil {
		if c, ok := d.callers.Load(extra.Header.Get(refHeader)); ok {
			return c.(*caller)
		}
	}
	return &caller{p: hub.AnonymousFrom("")}
}

// writeRPCError answers a request the SDK never sees with a JSON-RPC
// error.
func (d *Door) refuse(w http.ResponseWriter, status, code int, msg string) {
	d.stats.refused.Add(1)
	writeRPCError(w, status, code, msg)
}

func writeRPCError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": code, "message": msg},
	})
}
