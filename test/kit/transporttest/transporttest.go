// Package transporttest is the one behaviour suite every hub.Transport
// passes: results in order, exactly one final result, cleanup when the
// context ends, the error codes for a Thing nobody serves, timeouts. Each
// adapter runs it from its own tests (RunTransportTests) with a real agent
// on the far side of its protocol; the suite only speaks hub.Transport, so
// what it checks holds on every door.
package transporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The agent's behaviour the suite relies on, per affordance of TD:
const (
	// ActionCount's agent answers pending, then running with 1 … n (the
	// integer input), then completed with n.
	ActionCount = "count"
	// ActionFail's agent answers failed with a problem of ProblemType and
	// ProblemDetail.
	ActionFail = "fail"
	// ActionHang's agent reports the invocation on Agent.Hung and never
	// answers.
	ActionHang = "hang"
	// PropertyLevel's agent holds the value LevelValue and reports every
	// value written to it on Agent.Written.
	PropertyLevel = "level"
	LevelValue    = "42"
	// EventTick's values are what Agent.Emit publishes.
	EventTick = "tick"

	ProblemType   = "https://agent.example/errors#jammed"
	ProblemDetail = "the feeder is jammed"
)

// TD is the Thing Description the agent registers: the affordances above,
// each with one form whose href is formHref (the transport's own).
func TD(id, formHref string) []byte {
	aff := func(extra map[string]any) map[string]any {
		a := map[string]any{"forms": []any{map[string]any{"href": formHref}}}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	b, err := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  id,
		"title":               "transport suite agent",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{
			ActionCount: aff(map[string]any{"input": map[string]any{"type": "integer"}}),
			ActionFail:  aff(nil),
			ActionHang:  aff(nil),
		},
		"properties": map[string]any{PropertyLevel: aff(map[string]any{"type": "integer"})},
		"events":     map[string]any{EventTick: aff(nil)},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// Agent is the real agent on the far side of the transport, serving the
// Thing of Env.ThingID as the constants above say.
type Agent interface {
	// Hung receives once per invocation of ActionHang the agent got.
	Hung() <-chan struct{}
	// Written receives every value (JSON) written to PropertyLevel.
	Written() <-chan []byte
	// Emit publishes data (JSON) as a value of EventTick and returns once
	// it is sent.
	Emit(t testing.TB, data []byte)
	// Leave disconnects the agent; its Thing stays registered.
	Leave(t testing.TB)
}

// Env is one transport under test with its agent connected and its Thing
// registered.
type Env struct {
	Transport hub.Transport
	Registry  *hub.Registry
	ThingID   string
	Agent     Agent
	// Idle reports whether the transport holds nothing for any interaction
	// (routes, subscriptions) and, if not, what it holds; nil when the
	// transport does not show it.
	Idle func() (bool, string)
}

// wait bounds every wait of the suite for an event that is due.
const wait = 5 * time.Second

// RunTransportTests runs the suite; setup starts a fresh transport with a
// connected agent for each test.
func RunTransportTests(t *testing.T, setup func(t *testing.T) Env) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, Env)
	}{
		{"InvocationResultsInOrderThenOneFinal", invocationInOrder},
		{"ReportedFailureIsTheOneFinalResult", reportedFailure},
		{"ReadIsOneFinalResult", readProperty},
		{"WriteReachesTheAgentWithOneFinalResult", writeProperty},
		{"StreamPendingThenValuesInOrderUntilCancel", stream},
		{"CancelEndsTheInvocationAndCleansUp", cancelInvocation},
		{"DeadlineEndsTheInvocationWithoutAFinalResult", deadline},
		{"EmitErrorEndsTheDelivery", emitError},
		{"ThingNobodyServesIsUnavailable", absentThing},
		{"ThingWhoseAgentLeftIsUnavailable", agentLeft},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, setup(t)) })
	}
}

// interaction is what the Router would hand the transport.
func (e Env) interaction(t *testing.T, op hub.Op, name string, input string) hub.Interaction {
	t.Helper()
	th, err := e.Registry.Get(e.ThingID)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := e.Registry.Document(e.ThingID)
	if err != nil {
		t.Fatal(err)
	}
	member := map[hub.Op]string{hub.OpInvokeAction: "actions", hub.OpSubscribeEvent: "events"}[op]
	if member == "" {
		member = "properties"
	}
	affs, _ := doc[member].(map[string]any)
	aff, _ := affs[name].(map[string]any)
	if aff == nil {
		t.Fatalf("the TD has no %s %q", member, name)
	}
	in := hub.Interaction{ThingID: e.ThingID, Op: op, Name: name, Thing: &th, Affordance: aff, Accept: lmos.MediaJSON}
	if input != "" {
		in.Input, in.ContentType = []byte(input), lmos.MediaJSON
	}
	return in
}

// delivery is one Deliver running in its own goroutine, as a consumer's
// request runs.
type delivery struct {
	results chan hub.Result
	done    chan error
}

func (e Env) start(ctx context.Context, in hub.Interaction) *delivery {
	d := &delivery{results: make(chan hub.Result, 64), done: make(chan error, 1)}
	go func() {
		d.done <- e.Transport.Deliver(ctx, in, func(r hub.Result) error {
			select {
			case d.results <- r:
				return nil
			default:
				return errors.New("the suite's result queue is full")
			}
		})
	}()
	return d
}

// end waits for Deliver to return and gives its error and every result.
func (d *delivery) end(t *testing.T) (error, []hub.Result) {
	t.Helper()
	var err error
	select {
	case err = <-d.done:
	case <-time.After(wait):
		t.Fatalf("Deliver did not return within %v", wait)
	}
	var out []hub.Result
	for {
		select {
		case r := <-d.results:
			out = append(out, r)
		default:
			return err, out
		}
	}
}

// next waits for the next result of a delivery still running.
func (d *delivery) next(t *testing.T) hub.Result {
	t.Helper()
	select {
	case r := <-d.results:
		return r
	case err := <-d.done:
		t.Fatalf("Deliver returned %v while a result was due", err)
	case <-time.After(wait):
		t.Fatalf("no result within %v", wait)
	}
	return hub.Result{}
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// oneFinalLast fails unless exactly one result is final and it is the last.
func oneFinalLast(t *testing.T, out []hub.Result) {
	t.Helper()
	for i, r := range out {
		if r.Final() != (i == len(out)-1) {
			t.Fatalf("result %d of %d (%s) final=%v: want exactly one final result, the last; got %v", i+1, len(out), r.Status, r.Final(), statuses(out))
		}
	}
	if len(out) == 0 {
		t.Fatal("no result")
	}
}

// noFinal fails if an invocation nobody answered got a final result.
func noFinal(t *testing.T, out []hub.Result) {
	t.Helper()
	for _, r := range out {
		if r.Final() {
			t.Fatalf("a final result (%s) for an invocation nobody answered", r.Status)
		}
	}
}

func statuses(out []hub.Result) []string {
	s := make([]string, len(out))
	for i, r := range out {
		s[i] = r.Status + " " + string(r.Data)
	}
	return s
}

// idle waits until the transport holds nothing and no goroutine more than
// before is left.
func (e Env) idle(t *testing.T, goroutines int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, what := true, ""
		if e.Idle != nil {
			ok, what = e.Idle()
		}
		n := runtime.NumGoroutine()
		if ok && n <= goroutines {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not cleaned up within %v: transport holds %q; %d goroutines, %d before", wait, what, n, goroutines)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func invocationInOrder(t *testing.T, e Env) {
	err, out := e.start(context.Background(), e.interaction(t, hub.OpInvokeAction, ActionCount, "3")).end(t)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	want := []string{"pending ", "running 1", "running 2", "running 3", "completed 3"}
	var got []string
	for _, r := range out {
		if len(r.Data) > 0 && r.ContentType != lmos.MediaJSON {
			t.Fatalf("result %s in %q, the consumer accepts %s", r.Status, r.ContentType, lmos.MediaJSON)
		}
		got = append(got, r.Status+" "+compact(r.Data))
	}
	if len(got) != len(want) {
		t.Fatalf("results %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("results %q, want %q", got, want)
		}
	}
	oneFinalLast(t, out)
}

func reportedFailure(t *testing.T, e Env) {
	err, out := e.start(context.Background(), e.interaction(t, hub.OpInvokeAction, ActionFail, "")).end(t)
	if err != nil {
		t.Fatalf("Deliver: %v (a failure the Thing reports is a result, not an error)", err)
	}
	oneFinalLast(t, out)
	r := out[len(out)-1]
	if r.Status != hub.StatusFailed || r.Problem == nil || r.Problem.Type != ProblemType || r.Problem.Detail != ProblemDetail {
		t.Fatalf("final result %s, problem %+v; want failed with the agent's problem", r.Status, r.Problem)
	}
}

func readProperty(t *testing.T, e Env) {
	err, out := e.start(context.Background(), e.interaction(t, hub.OpReadProperty, PropertyLevel, "")).end(t)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if len(out) != 1 || out[0].Status != hub.StatusCompleted || compact(out[0].Data) != LevelValue {
		t.Fatalf("results %q, want one completed %s", statuses(out), LevelValue)
	}
}

func writeProperty(t *testing.T, e Env) {
	err, out := e.start(context.Background(), e.interaction(t, hub.OpWriteProperty, PropertyLevel, "7")).end(t)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if len(out) != 1 || out[0].Status != hub.StatusCompleted {
		t.Fatalf("results %q, want one completed", statuses(out))
	}
	select {
	case v := <-e.Agent.Written():
		if compact(v) != "7" {
			t.Fatalf("the agent got %s, want 7", v)
		}
	case <-time.After(wait):
		t.Fatal("the write never reached the agent")
	}
}

func stream(t *testing.T, e Env) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := e.start(ctx, e.interaction(t, hub.OpSubscribeEvent, EventTick, ""))
	// Pending, without data, once the subscription is in place: what the
	// agent emits from now on is not missed.
	if r := d.next(t); r.Status != hub.StatusPending || len(r.Data) != 0 {
		t.Fatalf("first result %s %s, want pending without data", r.Status, r.Data)
	}
	for i := 1; i <= 3; i++ {
		v := []byte{'0' + byte(i)}
		e.Agent.Emit(t, v)
		if r := d.next(t); r.Status != hub.StatusRunning || compact(r.Data) != string(v) {
			t.Fatalf("value %d: %s %s, want running %s", i, r.Status, r.Data, v)
		}
	}
	cancel()
	err, out := d.end(t)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Deliver ended the stream with %v, want nil or the context's error", err)
	}
	for _, r := range out {
		if r.Final() {
			t.Fatalf("a stream emitted a final result (%s)", r.Status)
		}
	}
	e.idle(t, before)
	// After the end nothing reaches the consumer any more.
	e.Agent.Emit(t, []byte("9"))
	select {
	case r := <-d.results:
		t.Fatalf("a value after the stream ended: %s %s", r.Status, r.Data)
	default:
	}
}

func cancelInvocation(t *testing.T, e Env) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	d := e.start(ctx, e.interaction(t, hub.OpInvokeAction, ActionHang, ""))
	select {
	case <-e.Agent.Hung():
	case <-time.After(wait):
		t.Fatal("the invocation never reached the agent")
	}
	cancel()
	err, out := d.end(t)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Deliver = %v, want the context's error", err)
	}
	noFinal(t, out)
	e.idle(t, before)
	// The agent stays usable.
	if err, out := e.start(context.Background(), e.interaction(t, hub.OpInvokeAction, ActionCount, "1")).end(t); err != nil || len(out) == 0 || out[len(out)-1].Status != hub.StatusCompleted {
		t.Fatalf("the next invocation: %v %q", err, statuses(out))
	}
}

func deadline(t *testing.T, e Env) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err, out := e.start(ctx, e.interaction(t, hub.OpInvokeAction, ActionHang, "")).end(t)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Deliver = %v, want one wrapping context.DeadlineExceeded (the Router makes it ETIMEOUT)", err)
	}
	noFinal(t, out)
	e.idle(t, before)
}

func emitError(t *testing.T, e Env) {
	gone := errors.New("the consumer is gone")
	n := 0
	err := e.Transport.Deliver(context.Background(), e.interaction(t, hub.OpInvokeAction, ActionCount, "3"),
		func(hub.Result) error { n++; return gone })
	if !errors.Is(err, gone) || n != 1 {
		t.Fatalf("Deliver = %v after %d emits, want the emit error after the first", err, n)
	}
	e.idle(t, runtime.NumGoroutine())
}

func absentThing(t *testing.T, e Env) {
	in := e.interaction(t, hub.OpInvokeAction, ActionCount, "1")
	in.ThingID = "urn:uuid:00000000-0000-4000-8000-00000000dead"
	th := *in.Thing
	th.ID = in.ThingID
	in.Thing = &th
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err, out := e.start(ctx, in).end(t)
	if code := hub.ErrorCode(err); code != hub.EUNAVAILABLE && code != hub.ENOTFOUND {
		t.Fatalf("Deliver = %v (code %q), want %s or %s", err, code, hub.EUNAVAILABLE, hub.ENOTFOUND)
	}
	if len(out) != 0 {
		t.Fatalf("results %q for a Thing nobody serves", statuses(out))
	}
}

func agentLeft(t *testing.T, e Env) {
	e.Agent.Leave(t)
	for _, op := range []struct {
		op    hub.Op
		name  string
		input string
	}{{hub.OpInvokeAction, ActionCount, "1"}, {hub.OpWriteProperty, PropertyLevel, "7"}} {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err, out := e.start(ctx, e.interaction(t, op.op, op.name, op.input)).end(t)
		cancel()
		if code := hub.ErrorCode(err); code != hub.EUNAVAILABLE {
			t.Fatalf("%s after the agent left: %v (code %q), want %s", op.op, err, code, hub.EUNAVAILABLE)
		}
		if len(out) != 0 {
			t.Fatalf("%s: results %q after the agent left", op.op, statuses(out))
		}
	}
}

// Offline is the condition Leave waits for when the hub takes a Thing
// offline as its agent leaves (WebSocket agents).
func Offline(reg *hub.Registry, id string) func() bool {
	return func() bool {
		th, err := reg.Get(id)
		return err == nil && th.Meta.Presence.Status == hub.PresenceOffline
	}
}

// IdleOf is an Env.Idle from counts of the invocations and streams in
// progress (the broker's Interactions, the WebSocket transport's): idle
// when every count is 0; the report names each count in argument order.
func IdleOf(interactions ...func() (invocations, streams int)) func() (bool, string) {
	return func() (bool, string) {
		ok, what := true, make([]string, 0, len(interactions))
		for _, count := range interactions {
			inv, streams := count()
			ok = ok && inv == 0 && streams == 0
			what = append(what, fmt.Sprintf("%d invocations, %d streams", inv, streams))
		}
		return ok, strings.Join(what, "; ")
	}
}
