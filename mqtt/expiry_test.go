package mqtt

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	mochi "github.com/mochi-mqtt/server/v2"

	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// mochiTicker is one of the tickers of s's event loop, read as
// stopMochiSweeps reads them.
func mochiTicker(t *testing.T, s *mochi.Server, name string) *time.Ticker {
	t.Helper()
	loop := reflect.ValueOf(s).Elem().FieldByName("loop")
	l := reflect.NewAt(loop.Type(), unsafe.Pointer(loop.UnsafeAddr())).Elem().Elem()
	f := l.FieldByName(name)
	return *(**time.Ticker)(unsafe.Pointer(f.UnsafeAddr()))
}

// The mochi the hub is built with has the tickers stopMochiTickers stops:
// stopped, they stay quiet; left alone, the one-second ones tick within a
// second. A mochi release that renames or retypes them fails here
// (stopMochiTickers then returns errMochiLoop and the broker keeps them).
func TestMochiTickersStopped(t *testing.T) {
	names := mochiSweeps
	stopped, running := mochi.New(&mochi.Options{SysTopicResendInterval: 1}), mochi.New(&mochi.Options{SysTopicResendInterval: 1})
	if err := stopMochiTickers(stopped, mochiSweeps...); err != nil {
		t.Fatalf("stopMochiTickers: %v", err)
	}
	if err := stopMochiTickers(stopped, "noSuchTicker"); !errors.Is(err, errMochiLoop) {
		t.Fatalf("a ticker mochi does not have: %v, want errMochiLoop", err)
	}
	wait := time.After(10 * time.Second) // a loaded machine may run them late
	ticked := map[string]bool{}
	for len(ticked) < len(names) {
		select {
		case <-mochiTicker(t, running, names[len(ticked)]).C:
			ticked[names[len(ticked)]] = true
		case <-wait:
			t.Fatalf("mochi's tickers that were not stopped did not tick within 10 s: %v", ticked)
		}
	}
	for _, name := range names {
		select {
		case <-mochiTicker(t, stopped, name).C:
			t.Errorf("%s ticked after stopMochiSweeps", name)
		default:
		}
	}
}

// An idle broker keeps no timer once nothing can expire (the join's reply
// expires within seconds); a session that outlives its connection sets
// one for the second it expires (mochi's rule: stop + Session Expiry
// Interval, expired once behind the clock).
func TestExpiryDeadlines(t *testing.T) {
	e := newEnv(t, nil)
	if e.b.exp == nil || e.b.exp.closed {
		t.Fatal("the hub's connection loop does not expire at deadlines")
	}
	due := func() int64 {
		e.b.exp.mu.Lock()
		defer e.b.exp.mu.Unlock()
		return e.b.exp.due
	}
	cp := withCreds(e.thing(t, "urn:exp:clean"))
	cp.ClientID = "exp-clean"
	c := mustDial(t, e.addr, cp)
	c.mustSub("lmos/v1/things/+/td")
	testwait.Eventually(t, 5*time.Second, "no timer with nothing to expire", func() bool { return due() == 0 })
	c.close()
	testwait.Eventually(t, 5*time.Second, "clean client gone", func() bool {
		_, ok := e.b.server.Clients.Get(cp.ClientID)
		return !ok
	})
	if d := due(); d != 0 {
		t.Fatalf("a clean session set a timer for %d", d)
	}
	const expiry = 3600
	wcp := persistentAs(e.thing(t, "urn:exp:w"), "exp-w", expiry)
	testwait.Eventually(t, 5*time.Second, "no timer with nothing to expire", func() bool { return due() == 0 })
	before := time.Now().Unix()
	w := mustDial(t, e.addr, wcp)
	w.close()
	testwait.Eventually(t, 5*time.Second, "timer for the session", func() bool { return due() != 0 })
	if d, after := due(), time.Now().Unix(); d < before+expiry+1 || d > after+expiry+1 {
		t.Fatalf("timer for %d, want between %d and %d", d, before+expiry+1, after+expiry+1)
	}
	e2 := newEnv(t, func(c *Config) { c.ConnLoop = ConnLoopMochi })
	if e2.b.exp != nil {
		t.Fatal("mochi's connection loop keeps mochi's sweeps; the hub's must not run too")
	}
}

// runMosquitto runs a mosquitto client to its end and returns its output;
// a timeout (-W) ends mosquitto_sub with 27, which is what wantCode says
// is expected.
func runMosquitto(t *testing.T, wantCode int, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, requireBin(t, name), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if code != wantCode {
		t.Fatalf("%s %v: exit %d, want %d: %s", name, args, code, wantCode, errb.String())
	}
	return out.String()
}

// A retained message and a message stored for an offline session, each
// with a Message Expiry Interval, are delivered before it and gone once
// it passed [MQTT-3.3.2-5], on both loops: mochi's sweeps every second, or
// the hub's at the message's deadline. Gone from memory without anyone
// asking for them (nothing else removes them), and from the store: after
// a restart neither comes back. mosquitto_pub and mosquitto_sub (MQTT 5)
// speak for the agents.
func TestExpiredMessagesGone(t *testing.T) {
	for _, loop := range []string{ConnLoopHub, ConnLoopMochi} {
		t.Run(loop, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ConnLoop = loop })
			const pubID = "urn:exp:pub"
			pub := e.thing(t, pubID)
			retained := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/properties/p"
			event := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/e"
			as := func(c *credentials) []string {
				host, port, _ := net.SplitHostPort(e.addr)
				return []string{"-h", host, "-p", port, "-V", "mqttv5", "-u", c.Username, "-P", c.Password}
			}
			// The watcher's session outlives it and is subscribed to the event.
			watch := e.thing(t, "urn:exp:watch")
			const watchID = "exp-watch"
			w := mustDial(t, e.addr, persistentAs(watch, watchID, 3600))
			w.mustSub(event)
			w.close()
			testwait.Eventually(t, 5*time.Second, "watcher offline", func() bool {
				cl, ok := e.b.server.Clients.Get(watchID)
				return ok && cl.StopTime() != 0
			})

			runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-pub-1", "-t", retained, "-m", "r", "-r", "-q", "1",
				"-D", "publish", "message-expiry-interval", "3")...)
			runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-pub-2", "-t", event, "-m", "e", "-q", "1",
				"-D", "publish", "message-expiry-interval", "2")...)
			if got := runMosquitto(t, 0, "mosquitto_sub", append(as(pub), "-i", "exp-sub-1", "-t", retained, "-C", "1", "-W", "5")...); got != "r\n" {
				t.Fatalf("before its expiry the retained message reads %q", got)
			}
			cl, ok := e.b.server.Clients.Get(watchID)
			if !ok || cl.State.Inflight.Len() != 1 {
				t.Fatalf("the offline session holds %d messages, want the event", cl.State.Inflight.Len())
			}

			testwait.Eventually(t, 10*time.Second, "expired messages removed", func() bool {
				_, kept := e.b.server.Topics.Retained.Get(retained)
				return !kept && cl.State.Inflight.Len() == 0
			})
			e.restart()
			if got := runMosquitto(t, 27, "mosquitto_sub", append(as(pub), "-i", "exp-sub-2", "-t", retained, "-C", "1", "-W", "1")...); got != "" {
				t.Fatalf("an expired retained message was delivered: %q", got)
			}
			if got := runMosquitto(t, 27, "mosquitto_sub", append(as(watch), "-i", watchID, "-c", "-x", "3600", "-t", event,
				"-q", "1", "-C", "1", "-W", "1")...); got != "" {
				t.Fatalf("an expired message was delivered to the resumed session: %q", got)
			}
		})
	}
}

// What Serve restores from the store expires at its deadline, on both
// loops: a session (mochi calls OnDisconnect for it), a retained message
// and a message kept for an offline session, which mochi restores without
// their expiry (restoreExpiry) and without a hook (the broker looks at them
// when it starts). mosquitto_pub publishes them, mosquitto_sub resumes the
// session and must get nothing.
func TestRestoredExpires(t *testing.T) {
	for _, loop := range []string{ConnLoopHub, ConnLoopMochi} {
		t.Run(loop, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ConnLoop = loop })
			const id, watchID, pubID = "exp-restored", "exp-rwatch", "urn:exp:rpub"
			w := mustDial(t, e.addr, persistentAs(e.thing(t, "urn:exp:restored"), id, 8))
			w.mustSub("lmos/v1/things/+/td")
			w.close()
			pub := e.thing(t, pubID)
			retained := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/properties/p"
			event := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/e"
			watch := e.thing(t, "urn:exp:rwatch")
			w = mustDial(t, e.addr, persistentAs(watch, watchID, 3600))
			w.mustSub(event)
			w.close()
			as := func(c *credentials) []string {
				host, port, _ := net.SplitHostPort(e.addr)
				return []string{"-h", host, "-p", port, "-V", "mqttv5", "-u", c.Username, "-P", c.Password}
			}
			runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-rpub", "-t", retained, "-m", "r", "-r", "-q", "1",
				"-D", "publish", "message-expiry-interval", "2")...)
			runMosquitto(t, 0, "mosquitto_pub", append(as(pub), "-i", "exp-rpub", "-t", event, "-m", "e", "-q", "1",
				"-D", "publish", "message-expiry-interval", "2")...)
			e.restart()
			if _, ok := e.b.server.Clients.Get(id); !ok {
				t.Fatal("the store did not keep the 8 s session across the restart")
			}
			if _, ok := e.b.server.Topics.Retained.Get(retained); !ok {
				t.Fatal("the store did not keep the retained message across the restart")
			}
			cl, ok := e.b.server.Clients.Get(watchID)
			if !ok || cl.State.Inflight.Len() != 1 {
				t.Fatal("the store did not keep the offline session's message across the restart")
			}
			// The messages go at their own deadline, before the session's.
			testwait.Eventually(t, 5*time.Second, "restored messages expired", func() bool {
				_, message := e.b.server.Topics.Retained.Get(retained)
				return !message && cl.State.Inflight.Len() == 0
			})
			if _, ok := e.b.server.Clients.Get(id); !ok {
				t.Fatal("the 8 s session expired with the 2 s messages")
			}
			testwait.Eventually(t, 10*time.Second, "restored session expired", func() bool {
				_, session := e.b.server.Clients.Get(id)
				return !session
			})
			if subs := e.b.server.Topics.Subscribers("lmos/v1/things/urn:x/td"); len(subs.Subscriptions) != 0 {
				t.Errorf("the expired session's subscription stayed in the topic index: %v", subs.Subscriptions)
			}
			if got := runMosquitto(t, 27, "mosquitto_sub", append(as(watch), "-i", watchID, "-c", "-x", "3600", "-t", event,
				"-q", "1", "-C", "1", "-W", "1")...); got != "" {
				t.Fatalf("an expired message was delivered to the resumed session: %q", got)
			}
		})
	}
}

// holdExpiry holds OnClientExpired of client id, standing for the
// scheduler pausing an expiring sweep between its look at the session and
// its delete: until a newer connection resumed the session, or 3 s passed
// (a broker that makes the two one step cannot let it resume meanwhile).
type holdExpiry struct {
	mochi.HookBase
	b       *Broker
	id      string
	entered chan struct{}
	done    chan struct{}
}

func (h *holdExpiry) ID() string           { return "test-hold-expiry" }
func (h *holdExpiry) Provides(b byte) bool { return b == mochi.OnClientExpired }
func (h *holdExpiry) OnClientExpired(cl *mochi.Client) {
	if cl.ID != h.id {
		return
	}
	defer close(h.done)
	close(h.entered)
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cur, ok := h.b.server.Clients.Get(h.id); ok && cur != cl {
			return
		}
	}
}

// A connection resuming a session while a sweep expires it ends up with a
// live session either way: the session it resumed (CONNACK Session
// Present 1) or a new one (0); the sweep never deletes the connection that
// came after its look (it did: the CONNACK said present, and the client
// was gone from the broker and got nothing). Found in review.
func TestSweepKeepsResumedSession(t *testing.T) {
	const id = "exp-resume"
	hook := &holdExpiry{id: id, entered: make(chan struct{}), done: make(chan struct{})}
	e := newEnvBefore(t, func(b *Broker) {
		hook.b = b
		b.hooks = append(b.hooks, hook)
	})
	watch, pub := e.thing(t, "urn:exp:rwatch"), e.thing(t, "urn:exp:rpub")
	event := lmos.ThingsPrefix + lmos.TopicKey("urn:exp:rpub") + "/events/e"
	w := mustDial(t, e.addr, persistentAs(watch, id, 1))
	w.mustSub(event)
	w.close()
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the 1 s session did not expire")
	}
	w2, ack, err := dial(t, e.addr, persistentAs(watch, id, 3600))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer w2.close()
	<-hook.done
	if !ack.SessionPresent {
		w2.mustSub(event) // a new session: it subscribes again
	}
	cur, ok := e.b.server.Clients.Get(id)
	if !ok || cur.Closed() {
		t.Fatalf("session present %v, but the broker has no live session %q (found %v)", ack.SessionPresent, id, ok)
	}
	p := mustDial(t, e.addr, persistentAs(pub, "exp-rpub", 0))
	defer p.close()
	p.mustPub(event, []byte("x"), 1, false)
	if m := w2.next(event); string(m.Payload) != "x" {
		t.Fatalf("got %q", m.Payload)
	}
}

// holdUntil holds OnClientExpired of client id until release closes, or
// 3 s pass: a sweep that Close overtakes.
type holdUntil struct {
	mochi.HookBase
	id      string
	entered chan struct{}
	release chan struct{}
}

func (h *holdUntil) ID() string           { return "test-hold-until" }
func (h *holdUntil) Provides(b byte) bool { return b == mochi.OnClientExpired }
func (h *holdUntil) OnClientExpired(cl *mochi.Client) {
	if cl.ID != h.id {
		return
	}
	close(h.entered)
	select {
	case <-h.release:
	case <-time.After(3 * time.Second):
	}
}

// A session that expired before the broker closed does not come back
// after a restart: Close waits for a sweep under way, so its deletion
// reaches the store's last write (it did not: the session was loaded
// again with a fresh expiry). Found in review.
func TestExpiredSessionSurvivesClose(t *testing.T) {
	const id = "exp-closed"
	hook := &holdUntil{id: id, entered: make(chan struct{}), release: make(chan struct{})}
	first := true
	e := newEnvBefore(t, func(b *Broker) {
		if first { // before the store's hook sees the expiry
			b.hooks = append([]mochi.Hook{hook}, b.hooks...)
			first = false
		}
	})
	w := mustDial(t, e.addr, persistentAs(e.thing(t, "urn:exp:closed"), id, 1))
	w.mustSub(lmos.ThingsPrefix + "+/td")
	w.close()
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the 1 s session did not expire")
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		e.stop()
	}()
	select {
	case <-stopped:
	case <-time.After(8 * time.Second):
		t.Fatal("close did not end")
	}
	close(hook.release)
	e.start()
	if _, ok := e.b.server.Clients.Get(id); ok {
		t.Fatalf("session %q expired before the broker closed, and is back after the restart", id)
	}
}
