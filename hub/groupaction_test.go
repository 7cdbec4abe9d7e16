package hub_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// gateTransport holds every invocation until the test lets one through
// (or its context ends), counting how many it holds at once.
type gateTransport struct {
	gate    chan struct{}
	started chan string
	output  []byte

	mu          sync.Mutex
	active, max int
}

func (g *gateTransport) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	g.mu.Lock()
	g.active++
	g.max = max(g.max, g.active)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.active--
		g.mu.Unlock()
	}()
	g.started <- in.ThingID
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return emit(hub.Result{Status: hub.StatusCompleted, Data: g.output, ContentType: lmos.MediaJSON})
}

// groupActionEnv is a registry in a temp dir with n lamps (action dim)
// reached over MQTT through a gateTransport, all in group "lamps".
func groupActionEnv(t *testing.T, n int, opts hub.GroupActionOptions) (*hub.GroupActions, *gateTransport) {
	t.Helper()
	e := newRouterEnv(t)
	g := &gateTransport{gate: make(chan struct{}, n), started: make(chan string, n), output: []byte(`"done"`)}
	e.router.Handle(hub.SourceMQTT, g)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("urn:lamp:%02d", i)
		e.put(t, id, hub.SourceMQTT)
		ids = append(ids, id)
	}
	if _, err := e.reg.CreateGroup(context.Background(), hub.GroupSpec{ID: "lamps", Title: "Lamps", Members: ids}); err != nil {
		t.Fatal(err)
	}
	return hub.NewGroupActions(e.reg, e.router, nil, opts), g
}

func runCall(t *testing.T, ga *hub.GroupActions, action string) ([]hub.MemberResult, lmos.GroupActionSummary) {
	t.Helper()
	c, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: action, Accept: lmos.MediaJSON})
	if err != nil {
		t.Fatal(err)
	}
	c.SetInput([]byte("50"), lmos.MediaJSON)
	var out []hub.MemberResult
	sum := c.Run(context.Background(), func(r hub.MemberResult) { out = append(out, r) })
	return out, sum
}

// One call invokes at most Parallel members at once, and every member gets
// exactly one result.
func TestGroupActionBoundsParallelism(t *testing.T) {
	ga, g := groupActionEnv(t, 10, hub.GroupActionOptions{Parallel: 3})
	done := make(chan []hub.MemberResult)
	go func() {
		out, _ := runCall(t, ga, "dim")
		done <- out
	}()
	for range 3 {
		<-g.started
	}
	// Held at the gate, the three hold every slot: a fourth must not start
	// (without the bound, all ten start at once).
	select {
	case id := <-g.started:
		t.Errorf("%s started while three members held the call's slots", id)
	case <-time.After(100 * time.Millisecond):
	}
	for range 10 {
		g.gate <- struct{}{}
	}
	out := <-done
	seen := map[string]bool{}
	for _, r := range out {
		if seen[r.Member] || r.Status != lmos.GroupResultCompleted || string(r.Output) != `"done"` {
			t.Errorf("result %+v (seen before: %v)", r, seen[r.Member])
		}
		seen[r.Member] = true
	}
	if len(seen) != 10 {
		t.Errorf("%d members got a result, want 10", len(seen))
	}
	if g.max > 3 {
		t.Errorf("%d members were invoked at once, the limit is 3", g.max)
	}
}

// The whole call ends at its timeout: members still waiting for a slot
// then are timedOut too, never left without a result.
func TestGroupActionTimeoutBoundsTheWholeCall(t *testing.T) {
	ga, g := groupActionEnv(t, 3, hub.GroupActionOptions{Parallel: 1, Timeout: 50 * time.Millisecond})
	out, sum := runCall(t, ga, "dim")
	if len(out) != 3 || sum.TimedOut != 3 || sum.Members != 3 {
		t.Fatalf("results %+v, summary %+v: want 3 timedOut", out, sum)
	}
	for _, r := range out {
		if r.Problem == nil || r.Problem.Status != 504 {
			t.Errorf("%s: problem %+v, want 504", r.Member, r.Problem)
		}
	}
	if g.max != 1 {
		t.Errorf("max %d at once", g.max)
	}
}

// The hub runs at most MaxCalls calls at once; a refused one invokes
// nobody. Unknown groups and actions no member has are ENOTFOUND.
func TestGroupActionPrepareRefusals(t *testing.T) {
	ga, g := groupActionEnv(t, 2, hub.GroupActionOptions{MaxCalls: 1})
	c, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "dim"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "dim"}); hub.ErrorCode(err) != hub.EUNAVAILABLE {
		t.Errorf("a second call at once: %v, want unavailable", err)
	}
	c.Release()
	c.Release() // twice is harmless
	c2, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "dim"})
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	c2.Release()
	if _, err := ga.Prepare(hub.GroupActionRequest{Group: "nowhere", Action: "dim"}); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "explode"}); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("no member has the action: %v", err)
	}
	if len(g.started) != 0 {
		t.Errorf("%d members invoked", len(g.started))
	}
}

// The outputs of one call are bounded in all: beyond MaxOutputBytes an
// output is dropped and its result says so (the member still completed).
func TestGroupActionOutputBudget(t *testing.T) {
	ga, g := groupActionEnv(t, 3, hub.GroupActionOptions{MaxOutputBytes: 13})
	for range 3 {
		g.gate <- struct{}{}
	}
	out, sum := runCall(t, ga, "dim")
	kept, dropped := 0, 0
	for _, r := range out {
		switch {
		case r.Status != lmos.GroupResultCompleted:
			t.Errorf("%+v", r)
		case len(r.Output) > 0 && r.Problem == nil:
			kept++
		case len(r.Output) == 0 && r.Problem != nil && r.Problem.Status == 413:
			dropped++
		default:
			t.Errorf("%+v", r)
		}
	}
	if kept != 2 || dropped != 1 || sum.Completed != 3 {
		t.Errorf("kept %d, dropped %d outputs (summary %+v); want 2 of 6 bytes within 13, 1 dropped", kept, dropped, sum)
	}
}

// lastGate answers every member at once with output, except hold, which
// answers (without output) only when the test lets it.
type lastGate struct {
	hold   string
	output []byte
	gate   chan struct{}
}

func (g *lastGate) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	if in.ThingID != g.hold {
		return emit(hub.Result{Status: hub.StatusCompleted, Data: g.output, ContentType: lmos.MediaJSON})
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return emit(hub.Result{Status: hub.StatusCompleted})
}

// All calls together hold at most MaxHeldBytes of outputs (issue 24):
// calls that keep their outputs until they answer (the JSON door) share
// one budget; an output beyond it is dropped with an unavailable problem,
// the member still completed, and every byte comes back on Release.
func TestGroupActionHubOutputBudget(t *testing.T) {
	e := newRouterEnv(t)
	const members, calls, size, budget = 4, 4, 100, 1000
	g := &lastGate{hold: fmt.Sprintf("urn:lamp:%02d", members-1), output: []byte(`"` + strings.Repeat("x", size-2) + `"`), gate: make(chan struct{}, calls)}
	e.router.Handle(hub.SourceMQTT, g)
	var ids []string
	for i := range members {
		id := fmt.Sprintf("urn:lamp:%02d", i)
		e.put(t, id, hub.SourceMQTT)
		ids = append(ids, id)
	}
	if _, err := e.reg.CreateGroup(context.Background(), hub.GroupSpec{ID: "lamps", Title: "Lamps", Members: ids}); err != nil {
		t.Fatal(err)
	}
	ga := hub.NewGroupActions(e.reg, e.router, nil, hub.GroupActionOptions{MaxHeldBytes: budget})
	var (
		mu               sync.Mutex
		kept, dropped    int
		emitted          = make(chan struct{}, calls*members)
		over             []int
		wg               sync.WaitGroup
		pending, release = make(chan *hub.GroupCall, calls), make(chan struct{})
	)
	for range calls {
		c, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "dim", Accept: lmos.MediaJSON})
		if err != nil {
			t.Fatal(err)
		}
		c.KeepOutputs()
		wg.Go(func() {
			c.Run(context.Background(), func(r hub.MemberResult) {
				mu.Lock()
				defer mu.Unlock()
				if h := ga.Held(); h > budget {
					over = append(over, h)
				}
				switch {
				case r.Status != lmos.GroupResultCompleted:
					t.Errorf("%+v", r)
				case len(r.Output) == size && r.Problem == nil:
					kept++
				case len(r.Output) == 0 && r.Problem != nil && r.Problem.Status == 503 && strings.HasSuffix(r.Problem.Type, "#unavailable"):
					dropped++
				case r.Member == g.hold && len(r.Output) == 0 && r.Problem == nil:
				default:
					t.Errorf("%+v", r)
				}
				emitted <- struct{}{}
			})
			pending <- c
			<-release
			c.Release()
		})
	}
	// Every call has its three immediate outputs admitted (emit follows
	// admission) before any call may answer and give its bytes back.
	for range calls * (members - 1) {
		<-emitted
	}
	mu.Lock()
	if kept != budget/size || dropped != calls*(members-1)-budget/size {
		t.Errorf("kept %d, dropped %d outputs of %d bytes; want %d within the budget of %d, the rest dropped", kept, dropped, size, budget/size, budget)
	}
	if len(over) > 0 {
		t.Errorf("held beyond the budget: %v", over)
	}
	mu.Unlock()
	for range calls {
		g.gate <- struct{}{}
	}
	for range calls {
		<-pending
	}
	if h := ga.Held(); h != budget/size*size {
		t.Errorf("held %d bytes before the calls are released, want %d", h, budget/size*size)
	}
	close(release)
	wg.Wait()
	if h := ga.Held(); h != 0 {
		t.Errorf("held %d bytes after every call is released", h)
	}
}

// All calls together invoke at most MaxInFlight members at once (issue
// 24): each invocation may bring an answer of up to 1 MiB into memory
// before the budget can count it. Two calls of 4 members, 4 at once each,
// with 3 places on the hub: never more than 3 members are invoked at
// once, and every member still gets its result.
func TestGroupActionHubInFlight(t *testing.T) {
	ga, g := groupActionEnv(t, 4, hub.GroupActionOptions{Parallel: 4, MaxInFlight: 3})
	done := make(chan []hub.MemberResult, 2)
	for range 2 {
		go func() {
			out, _ := runCall(t, ga, "dim")
			done <- out
		}()
	}
	// Three invocations start; the rest wait for a place.
	for range 3 {
		<-g.started
	}
	select {
	case id := <-g.started:
		t.Fatalf("a fourth member (%s) was invoked while three held the hub's places", id)
	default:
	}
	// Let them through as they come until both calls have answered.
	for answered := 0; answered < 2; {
		var out []hub.MemberResult
		select {
		case g.gate <- struct{}{}:
			continue
		case <-g.started:
			continue
		case out = <-done:
			answered++
		}
		if len(out) != 4 {
			t.Fatalf("%d results", len(out))
		}
		for _, r := range out {
			if r.Status != lmos.GroupResultCompleted {
				t.Errorf("%+v", r)
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max != 3 {
		t.Errorf("at most %d members invoked at once, want 3", g.max)
	}
}

// A call cancelled (its requester gone) or timed out gives back all it
// took of the hub: its call slot, its members' places in flight, and the
// outputs it kept once released. A leak of any would refuse or starve
// every later call. One slot, two places, a budget of two outputs: a
// call that ended early is followed by one that needs all of them.
func TestGroupActionEndedCallReturnsBudget(t *testing.T) {
	const members, size = 4, 100
	for _, how := range []string{"cancelled", "timed out"} {
		t.Run(how, func(t *testing.T) {
			e := newRouterEnv(t)
			g := &gateTransport{gate: make(chan struct{}, 4*members), started: make(chan string, 4*members),
				output: []byte(`"` + strings.Repeat("x", size-2) + `"`)}
			e.router.Handle(hub.SourceMQTT, g)
			var ids []string
			for i := range members {
				id := fmt.Sprintf("urn:lamp:%02d", i)
				e.put(t, id, hub.SourceMQTT)
				ids = append(ids, id)
			}
			if _, err := e.reg.CreateGroup(context.Background(), hub.GroupSpec{ID: "lamps", Title: "Lamps", Members: ids}); err != nil {
				t.Fatal(err)
			}
			ga := hub.NewGroupActions(e.reg, e.router, nil, hub.GroupActionOptions{MaxCalls: 1, Parallel: 2, MaxInFlight: 2, MaxHeldBytes: 2 * size})
			prepare := func() *hub.GroupCall {
				t.Helper()
				c, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "dim", Accept: lmos.MediaJSON})
				if err != nil {
					t.Fatal(err)
				}
				c.SetInput([]byte("50"), lmos.MediaJSON)
				return c
			}

			c := prepare()
			c.KeepOutputs()
			var results []hub.MemberResult
			var sum lmos.GroupActionSummary
			wantKept := 0
			if how == "cancelled" {
				// One member answers (its output kept), one is held at the
				// gate, two wait for a place; then the requester goes.
				ctx, cancel := context.WithCancel(context.Background())
				first := make(chan struct{})
				done := make(chan lmos.GroupActionSummary)
				go func() {
					done <- c.Run(ctx, func(r hub.MemberResult) {
						results = append(results, r)
						if len(results) == 1 {
							close(first)
						}
					})
				}()
				<-g.started
				<-g.started
				g.gate <- struct{}{}
				<-first
				cancel()
				sum = <-done
				wantKept = 1
			} else {
				// Nobody answers: every member times out, whichever held a
				// place or waited for one (a parent deadline ends a call as
				// the hub's own timeout does).
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				sum = c.Run(ctx, func(r hub.MemberResult) { results = append(results, r) })
			}
			if sum.Completed != wantKept || sum.TimedOut != members-wantKept || len(results) != members {
				t.Fatalf("summary %+v, %d results", sum, len(results))
			}
			if h := ga.Held(); h != wantKept*size {
				t.Errorf("held %d bytes before Release, want the kept outputs' %d", h, wantKept*size)
			}
			// The slot is back once Run returns; the kept outputs on Release.
			probe, err := ga.Prepare(hub.GroupActionRequest{Group: "lamps", Action: "dim", Accept: lmos.MediaJSON})
			if err != nil {
				t.Fatalf("a call after the first ended: %v", err)
			}
			probe.Release()
			c.Release()
			if h := ga.Held(); h != 0 {
				t.Errorf("held %d bytes after Release", h)
			}

			// The next call gets the slot, both places and the whole budget.
			c2 := prepare()
			c2.KeepOutputs()
			defer c2.Release()
			for range members {
				g.gate <- struct{}{}
			}
			kept := 0
			sum = c2.Run(context.Background(), func(r hub.MemberResult) {
				if len(r.Output) == size && r.Problem == nil {
					kept++
				}
			})
			if sum.Completed != members || kept != 2 {
				t.Errorf("the next call: %+v, %d outputs kept; want %d completed and 2 kept (the budget)", sum, kept, members)
			}
			g.mu.Lock()
			if g.max > 2 {
				t.Errorf("%d members invoked at once, 2 places", g.max)
			}
			g.mu.Unlock()
		})
	}
}
