package mqtt

import (
	"errors"
	"reflect"
	"sync"
	"time"
	"unsafe"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Expiry at its deadline instead of every second.
//
// mochi's event loop wakes every second, four times, to look for what has
// expired: disconnected sessions, inflight and retained messages past their
// Message Expiry Interval, delayed wills. Each look copies a map (every
// client, twice; every retained message), so an idle hub made ~20 KB of
// garbage a second with no client at all, grew its heap until the next
// collection, and kept that code's pages mapped: of an idle hub's
// resident memory, ~1.5 MB of its binary's pages and ~2.7 MB of heap
// (docs/PERFORMANCE.md, "Idle RSS").
//
// On the hub's connection loop the broker stops those four tickers
// (stopMochiTickers) and makes the same checks, with mochi's rules, at the
// second something can expire: a session when its client disconnects, a
// message when it is retained or put in flight, whatever was restored from
// the store when the broker starts. Deadlines are whole seconds, as mochi's
// checks were; between them the hub does not wake, except every
// maxExpiryWait while something has a deadline. Delayed wills are the hub's
// own on its loop (willdelay.go): mochi's list of them stays empty there.
type expiry struct {
	mochi.HookBase
	b *Broker

	mu     sync.Mutex
	t      *time.Timer
	due    int64 // the Unix second t is set for; 0: not set
	closed bool
	// running counts the timed sweeps under way: close waits for them, so
	// that what one expires reaches the store's hook before it flushes.
	running sync.WaitGroup

	sweeps uint64 // how many sweeps ran (mu); for tests
}

func (e *expiry) ID() string { return "lmos-expiry" }

func (e *expiry) Provides(b byte) bool {
	switch b {
	case mochi.OnDisconnect, mochi.OnRetainMessage, mochi.OnQosPublish:
		return true
	}
	return false
}

// OnDisconnect sets the deadline of a session that outlives its
// connection.
func (e *expiry) OnDisconnect(cl *mochi.Client, _ error, expire bool) {
	if !expire {
		e.at(e.sessionEnd(cl))
	}
}

// OnRetainMessage sets the deadline of a retained message that expires.
func (e *expiry) OnRetainMessage(_ *mochi.Client, pk packets.Packet, _ int64) { e.message(pk) }

// OnQosPublish sets the deadline of a message in flight that expires.
func (e *expiry) OnQosPublish(_ *mochi.Client, pk packets.Packet, _ int64, _ int) { e.message(pk) }

// message sets pk's deadline when it has one. mochi drops a message once
// its Expiry is behind the clock (Expiry < now): one second after it.
// The hub's own delivery path calls it where it calls the store's hook
// directly (fanout.go, qos.go); e is nil on mochi's connection loop.
func (e *expiry) message(pk packets.Packet) {
	if e != nil && pk.Expiry > 0 {
		e.at(pk.Expiry + 1)
	}
}

// sessionEnd is the second at which cl's session has expired by mochi's
// rule (clearExpiredClients): the client's Session Expiry Interval when it
// sent one (MQTT 5), else the broker's maximum; expired once stop+expire
// is behind the clock.
func (e *expiry) sessionEnd(cl *mochi.Client) int64 {
	stop := cl.StopTime()
	if stop == 0 {
		return 0
	}
	expire := e.b.server.Options.Capabilities.MaximumSessionExpiryInterval
	if cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryIntervalFlag {
		expire = cl.Properties.Props.SessionExpiryInterval
	}
	return stop + int64(expire) + 1
}

// at makes a sweep run at second sec, unless one runs sooner; 0 is none.
func (e *expiry) at(sec int64) {
	if sec <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || (e.due != 0 && e.due <= sec) {
		return
	}
	e.due = sec
	wait := min(time.Until(time.Unix(sec, 0)), maxExpiryWait)
	if e.t == nil {
		e.t = time.AfterFunc(wait, e.fire)
	} else {
		e.t.Reset(wait)
	}
}

func (e *expiry) fire() {
	e.mu.Lock()
	if e.closed || e.due == 0 {
		e.mu.Unlock()
		return
	}
	now := time.Now().Unix()
	if e.due > now {
		// Not due yet: a wait longer than maxExpiryWait, or the wall
		// clock went back since the timer was set.
		e.t.Reset(min(time.Until(time.Unix(e.due, 0)), maxExpiryWait))
		e.mu.Unlock()
		return
	}
	e.due = 0
	e.sweeps++
	e.running.Add(1)
	e.mu.Unlock()
	defer e.running.Done()
	e.sweep(now)
}

// sweep does what mochi's clearExpiredClients, clearExpiredInflights and
// clearExpiredRetainedMessages do at second now, and sets the next
// deadline of what is left.
func (e *expiry) sweep(now int64) {
	next := int64(0)
	soonest := func(sec int64) {
		if sec > now && (next == 0 || sec < next) {
			next = sec
		}
	}
	s := e.b.server
	maxMessage := s.Options.Capabilities.MaximumMessageExpiryInterval
	for id, cl := range s.Clients.GetAll() {
		end := e.sessionEnd(cl)
		if end != 0 && end <= now {
			// Checked and deleted under sessionMu: a connection resuming
			// the session between the two would be deleted with it.
			e.b.sessionMu.Lock()
			cur, ok := s.Clients.Get(id)
			if ok && cur == cl {
				e.b.onClientExpired(cl)
				s.Clients.Delete(id) // [MQTT-4.1.0-2]
			}
			e.b.sessionMu.Unlock()
			if !ok || cur == cl {
				continue
			}
			// Resumed by a newer connection since GetAll: its deadlines.
			cl, end = cur, e.sessionEnd(cur)
		}
		soonest(end)
		// ClearExpiredInflights calls the hooks' OnQosDropped itself (mochi
		// calls them a second time with the packet id alone; once is enough).
		cl.ClearExpiredInflights(now, maxMessage)
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if pk.ProtocolVersion == 5 && pk.Expiry > 0 {
				soonest(pk.Expiry + 1)
			}
		}
	}
	for filter, pk := range s.Topics.Retained.GetAll() {
		if pk.ProtocolVersion != 5 || pk.Expiry <= 0 {
			continue
		}
		if pk.Expiry < now { // [MQTT-3.3.2-5]
			s.Topics.Retained.Delete(filter)
			e.b.onRetainedExpired(filter)
			continue
		}
		soonest(pk.Expiry + 1)
	}
	e.at(next)
}

// close stops the sweeps; the broker is closing.
func (e *expiry) close() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.closed = true
	if e.t != nil {
		e.t.Stop()
	}
	e.mu.Unlock()
	e.running.Wait()
}

func (b *Broker) onClientExpired(cl *mochi.Client) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnClientExpired) {
			h.OnClientExpired(cl)
		}
	}
}

func (b *Broker) onRetainedExpired(filter string) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnRetainedExpired) {
			h.OnRetainedExpired(filter)
		}
	}
}

// restoreExpiry gives the messages Serve restored from the store the
// expiry they had. mochi's storage.Message keeps when a message was made
// and its Message Expiry Interval, but ToPacket leaves Expiry unset, and
// the protocol version mochi's checks ask for: a retained message or one
// kept for an offline session never expired after a restart, and was
// resent with its whole interval instead of what was left of it
// [MQTT-3.3.2-5] [MQTT-3.3.2-6]. Only MQTT 5 publishes carry the
// interval.
func (b *Broker) restoreExpiry() {
	restored := func(pk *packets.Packet) bool {
		if pk.Expiry != 0 || pk.Properties.MessageExpiryInterval == 0 {
			return false
		}
		pk.Expiry = pk.Created + int64(pk.Properties.MessageExpiryInterval)
		pk.ProtocolVersion = 5
		return true
	}
	for _, pk := range b.server.Topics.Retained.GetAll() {
		if restored(&pk) {
			b.server.Topics.RetainMessage(pk)
		}
	}
	for _, cl := range b.server.Clients.GetAll() {
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if restored(&pk) {
				cl.State.Inflight.Set(pk)
			}
		}
	}
}

// maxExpiryWait bounds one wait for a deadline. Deadlines are wall-clock
// seconds, a timer waits on the monotonic clock: a Raspberry Pi without a
// real-time clock boots on a saved time and then NTP moves the clock on,
// maybe by days, past deadlines of what it restored. Looking again every
// 10 minutes while something has a deadline finds them (mochi looked every
// second); an idle hub with nothing to expire still does not wake.
const maxExpiryWait = 10 * time.Minute

// errMochiLoop: the mochi the hub is built with does not have the event
// loop stopMochiTickers knows.
var errMochiLoop = errors.New("mochi's event loop is not the one the hub knows")

// mochiSweeps are the tickers of mochi's event loop that look for what
// has expired every second (expiry.go). ($SYS is quiet through mochi's
// own option, sysInterval.)
var mochiSweeps = []string{"clientExpiry", "inflightExpiry", "retainedExpiry", "willDelaySend"}

// stopMochiTickers stops the named tickers of s's event loop. mochi has
// no option for it: they are reached by reflection, each checked by name
// and type, so a mochi release that changed them makes this an error and
// leaves every ticker running (TestMochiTickersStopped fails on such a
// release). Call it after Serve has started the loop.
func stopMochiTickers(s *mochi.Server, names ...string) error {
	loop := reflect.ValueOf(s).Elem().FieldByName("loop")
	if !loop.IsValid() || loop.Kind() != reflect.Pointer || loop.Type().Elem().Kind() != reflect.Struct {
		return errMochiLoop
	}
	// An unexported field cannot be read through reflect; its address can.
	l := reflect.NewAt(loop.Type(), unsafe.Pointer(loop.UnsafeAddr())).Elem()
	if l.IsNil() {
		return errMochiLoop
	}
	tickerType := reflect.TypeFor[*time.Ticker]()
	tickers := make([]*time.Ticker, 0, len(names))
	for _, name := range names {
		f := l.Elem().FieldByName(name)
		if !f.IsValid() || f.Type() != tickerType {
			return errMochiLoop
		}
		t := *(**time.Ticker)(unsafe.Pointer(f.UnsafeAddr()))
		if t == nil {
			return errMochiLoop
		}
		tickers = append(tickers, t)
	}
	for _, t := range tickers {
		t.Stop()
	}
	return nil
}
