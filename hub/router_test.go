package hub_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// fakeTransport is a hub.Transport that answers from a script: it records
// what it was given, emits results in order and, with wait set, holds the
// delivery until its context ends (an agent that never answers).
type fakeTransport struct {
	results []hub.Result
	wait    bool
	err     error

	mu    sync.Mutex
	got   []hub.Interaction
	ended chan error // the ctx error the transport saw when it returned
}

func newFake(results ...hub.Result) *fakeTransport {
	return &fakeTransport{results: results, ended: make(chan error, 16)}
}

func (f *fakeTransport) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	f.mu.Lock()
	f.got = append(f.got, in)
	f.mu.Unlock()
	defer func() { f.ended <- ctx.Err() }()
	for _, r := range f.results {
		if err := emit(r); err != nil {
			return err
		}
	}
	if f.wait {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.err
}

func (f *fakeTransport) calls() []hub.Interaction {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hub.Interaction(nil), f.got...)
}

// routerEnv is a Router over a real registry in a temp dir with a fake
// transport for MQTT and one for WebSocket Things.
type routerEnv struct {
	reg      *hub.Registry
	router   *hub.Router
	mqtt, ws *fakeTransport
}

func newRouterEnv(t *testing.T) *routerEnv {
	t.Helper()
	reg := newRegistry(t, openStore(t), hub.RegistryOptions{})
	e := &routerEnv{reg: reg, router: hub.NewRouter(reg), mqtt: newFake(), ws: newFake()}
	e.router.Handle(hub.SourceMQTT, e.mqtt)
	e.router.Handle(hub.SourceWS, e.ws)
	return e
}

// lampTD has one of each affordance kind, a read-only and a write-only
// property, and an action whose input is an integer.
func lampTD(id string) []byte {
	const f = `"forms":[{"href":"mqtt://hub/x"}]`
	return testTD(id, "Lamp",
		"properties", `{"on":{"type":"boolean",`+f+`},"power":{"type":"number","readOnly":true,`+f+`},"secret":{"type":"string","writeOnly":true,`+f+`}}`,
		"actions", `{"dim":{"input":{"type":"integer","minimum":0,"maximum":100},`+f+`}}`,
		"events", `{"overheat":{"data":{"type":"number"},`+f+`}}`)
}

func (e *routerEnv) put(t *testing.T, id string, src hub.Source) {
	t.Helper()
	if _, err := e.reg.Put(context.Background(), id, lampTD(id), hub.Origin{Source: src}); err != nil {
		var he *hub.Error
		if errors.As(err, &he) {
			t.Fatalf("%v: %+v", err, he.Fields)
		}
		t.Fatal(err)
	}
}

// deliver runs the Router and collects what it emitted.
func (e *routerEnv) deliver(ctx context.Context, in hub.Interaction) ([]hub.Result, error) {
	var out []hub.Result
	err := e.router.Deliver(ctx, in, func(r hub.Result) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := hub.ErrorCode(err); got != code {
		t.Fatalf("error %v: code %q, want %q", err, got, code)
	}
}

func TestRouterDeliversToTheTransportOfTheThingsOrigin(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp:mqtt", hub.SourceMQTT)
	e.put(t, "urn:lamp:ws", hub.SourceWS)
	done := hub.Result{Status: hub.StatusCompleted, Data: []byte("true"), ContentType: lmos.MediaJSON}
	e.mqtt.results, e.ws.results = []hub.Result{done}, []hub.Result{done}

	for _, id := range []string{"urn:lamp:mqtt", "urn:lamp:ws"} {
		if _, err := e.deliver(context.Background(), hub.Interaction{ThingID: id, Op: hub.OpReadProperty, Name: "on"}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	m, w := e.mqtt.calls(), e.ws.calls()
	if len(m) != 1 || m[0].ThingID != "urn:lamp:mqtt" || len(w) != 1 || w[0].ThingID != "urn:lamp:ws" {
		t.Fatalf("mqtt got %d (%v), ws got %d (%v); want one each, for its own Thing", len(m), m, len(w), w)
	}
	// The Router hands the transport the Thing and the affordance.
	if m[0].Thing == nil || m[0].Thing.ID != "urn:lamp:mqtt" || m[0].Affordance["type"] != "boolean" {
		t.Fatalf("interaction not filled in: Thing %v, Affordance %v", m[0].Thing, m[0].Affordance)
	}
}

func TestRouterPrefersTheTransportPresenceCameThrough(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceHTTP) // registered over HTTP: no transport of its own
	if err := e.reg.SetPresence(context.Background(), "urn:lamp", hub.PresenceOnline, hub.SourceWS); err != nil {
		t.Fatal(err)
	}
	e.ws.results = []hub.Result{{Status: hub.StatusCompleted}}
	if _, err := e.deliver(context.Background(), hub.Interaction{ThingID: "urn:lamp", Op: hub.OpReadProperty, Name: "on"}); err != nil {
		t.Fatal(err)
	}
	if len(e.ws.calls()) != 1 || len(e.mqtt.calls()) != 0 {
		t.Fatalf("ws got %d, mqtt %d; want the presence's transport (ws) only", len(e.ws.calls()), len(e.mqtt.calls()))
	}
}

func TestRouterRefusesWhatNoTransportShouldSee(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	e.put(t, "urn:lamp:http", hub.SourceHTTP)
	e.put(t, "urn:lamp:off", hub.SourceMQTT)
	if err := e.reg.SetPresence(context.Background(), "urn:lamp:off", hub.PresenceOffline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   hub.Interaction
		code string
	}{
		{"unknown Thing", hub.Interaction{ThingID: "urn:nobody", Op: hub.OpReadProperty, Name: "on"}, hub.ENOTFOUND},
		{"unknown property", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpReadProperty, Name: "colour"}, hub.ENOTFOUND},
		{"action named like a property", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpInvokeAction, Name: "on"}, hub.ENOTFOUND},
		{"unknown event", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpSubscribeEvent, Name: "on"}, hub.ENOTFOUND},
		{"unknown operation", hub.Interaction{ThingID: "urn:lamp", Op: "readallproperties", Name: "on"}, hub.EINVALID},
		{"no transport reaches it", hub.Interaction{ThingID: "urn:lamp:http", Op: hub.OpReadProperty, Name: "on"}, hub.EUNAVAILABLE},
		{"offline", hub.Interaction{ThingID: "urn:lamp:off", Op: hub.OpReadProperty, Name: "on"}, hub.EUNAVAILABLE},
		{"write read-only", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpWriteProperty, Name: "power", Input: []byte("1")}, hub.EMETHOD},
		{"read write-only", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpReadProperty, Name: "secret"}, hub.EMETHOD},
		{"observe write-only", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpObserveProperty, Name: "secret"}, hub.EMETHOD},
		{"write against the schema", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpWriteProperty, Name: "on", Input: []byte(`"yes"`)}, hub.EINVALID},
		{"input against the schema", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpInvokeAction, Name: "dim", Input: []byte(`101`)}, hub.EINVALID},
		{"input not JSON", hub.Interaction{ThingID: "urn:lamp", Op: hub.OpInvokeAction, Name: "dim", Input: []byte(`{`)}, hub.EINVALID},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := e.deliver(context.Background(), c.in)
			wantCode(t, err, c.code)
			if len(out) != 0 {
				t.Fatalf("emitted %v on a refusal", out)
			}
		})
	}
	if n := len(e.mqtt.calls()) + len(e.ws.calls()); n != 0 {
		t.Fatalf("transports saw %d refused interactions", n)
	}
}

func TestRouterCheckNamesTheTransport(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceWS)
	tr, th, err := e.router.Check(hub.Interaction{ThingID: "urn:lamp", Op: hub.OpObserveProperty, Name: "on"})
	if err != nil {
		t.Fatal(err)
	}
	if tr != hub.Transport(e.ws) || th.ID != "urn:lamp" {
		t.Fatalf("Check = %v, %q; want the ws transport and the Thing", tr, th.ID)
	}
	if len(e.ws.calls()) != 0 {
		t.Fatal("Check delivered")
	}
}

func TestRouterPassesResultsThroughInOrder(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	want := []hub.Result{
		{Status: hub.StatusPending},
		{Status: hub.StatusRunning, Data: []byte("10"), ContentType: lmos.MediaJSON},
		{Status: hub.StatusRunning, Data: []byte("20"), ContentType: lmos.MediaJSON},
		{Status: hub.StatusCompleted, Data: []byte("30"), ContentType: lmos.MediaJSON},
	}
	e.mqtt.results = want
	out, err := e.deliver(context.Background(), hub.Interaction{ThingID: "urn:lamp", Op: hub.OpInvokeAction, Name: "dim", Input: []byte("30")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(want) {
		t.Fatalf("emitted %d results, want %d", len(out), len(want))
	}
	for i := range want {
		if out[i].Status != want[i].Status || string(out[i].Data) != string(want[i].Data) {
			t.Fatalf("result %d = %s %s, want %s %s", i, out[i].Status, out[i].Data, want[i].Status, want[i].Data)
		}
	}
}

func TestRouterFailsAOneShotWithoutAFinalResult(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	e.mqtt.results = []hub.Result{{Status: hub.StatusRunning}}
	out, err := e.deliver(context.Background(), hub.Interaction{ThingID: "urn:lamp", Op: hub.OpInvokeAction, Name: "dim"})
	wantCode(t, err, hub.EINTERNAL)
	if len(out) != 1 {
		t.Fatalf("emitted %d results, want the one running result", len(out))
	}
}

func TestRouterTimesOutAOneShotWhenItsContextExpires(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	e.mqtt.wait = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := e.deliver(ctx, hub.Interaction{ThingID: "urn:lamp", Op: hub.OpReadProperty, Name: "on"})
	wantCode(t, err, hub.ETIMEOUT)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v does not wrap the deadline", err)
	}
	// The transport returned (it had its chance to clean up) before the
	// Router did.
	select {
	case seen := <-e.mqtt.ended:
		if seen == nil {
			t.Fatal("the transport returned with its context still live")
		}
	default:
		t.Fatal("the Router returned before the transport")
	}
}

func TestRouterEndsAStreamQuietlyWhenItsContextEnds(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceWS)
	e.ws.wait = true
	e.ws.results = []hub.Result{{Status: hub.StatusPending}, {Status: hub.StatusRunning, Data: []byte("1")}}
	for _, in := range []hub.Interaction{
		{ThingID: "urn:lamp", Op: hub.OpObserveProperty, Name: "on"},
		{ThingID: "urn:lamp", Op: hub.OpSubscribeEvent, Name: "overheat"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var n int
		err := e.router.Deliver(ctx, in, func(r hub.Result) error {
			if n++; n == 2 {
				cancel() // the consumer goes away after the first value
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v, want nil once the consumer cancelled", in.Op, err)
		}
		if n != 2 {
			t.Fatalf("%s: emitted %d, want 2", in.Op, n)
		}
		if seen := <-e.ws.ended; !errors.Is(seen, context.Canceled) {
			t.Fatalf("%s: the transport ended with ctx error %v", in.Op, seen)
		}
	}
}

func TestRouterStopsWhenEmitFails(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	e.mqtt.results = []hub.Result{{Status: hub.StatusPending}, {Status: hub.StatusRunning}, {Status: hub.StatusCompleted}}
	gone := errors.New("consumer gone")
	n := 0
	err := e.router.Deliver(context.Background(), hub.Interaction{ThingID: "urn:lamp", Op: hub.OpInvokeAction, Name: "dim"},
		func(hub.Result) error { n++; return gone })
	if !errors.Is(err, gone) || n != 1 {
		t.Fatalf("Deliver = %v after %d emits; want the emit error after the first", err, n)
	}
}

func TestRouterKeepsTheTransportsErrorCode(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	e.mqtt.err = hub.Errorf(hub.EUNAVAILABLE, "nobody serves it")
	_, err := e.deliver(context.Background(), hub.Interaction{ThingID: "urn:lamp", Op: hub.OpReadProperty, Name: "on"})
	wantCode(t, err, hub.EUNAVAILABLE)
}

func TestRouterHandleReplacesATransport(t *testing.T) {
	e := newRouterEnv(t)
	e.put(t, "urn:lamp", hub.SourceMQTT)
	other := newFake(hub.Result{Status: hub.StatusCompleted})
	e.router.Handle(hub.SourceMQTT, other)
	if _, err := e.deliver(context.Background(), hub.Interaction{ThingID: "urn:lamp", Op: hub.OpReadProperty, Name: "on"}); err != nil {
		t.Fatal(err)
	}
	if len(other.calls()) != 1 || len(e.mqtt.calls()) != 0 {
		t.Fatal("the replaced transport still got the interaction")
	}
}
