package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Group actions (PROTOCOL §7, §10 "Group actions"): one call invokes an
// action on every member of a group whose TD has it, in parallel, through
// the Router (the path of a single invocation, so MQTT and WebSocket
// members alike), and yields exactly one result per member as each
// member answers. The doors (HTTP, WebSocket, MQTT) only translate.

// Defaults of GroupActionOptions.
const (
	DefaultGroupActionParallel = 32
	DefaultGroupActionCalls    = 64
	DefaultGroupActionOutput   = 4 << 20
	// DefaultGroupActionHeld is what all group actions together hold of
	// members' outputs: 64 calls of 4 MiB each held 256 MiB, and an
	// answer's encoding as much again, more than a 512 MB board spares.
	DefaultGroupActionHeld = 32 << 20
	// DefaultGroupActionInFlight bounds the members invoked at once by all
	// calls together, as many as one call may: each invocation may bring
	// an answer of up to 1 MiB (the MQTT packet, the WebSocket message)
	// into memory before it is counted, and 64 calls of 32 members each
	// were 2,048 of them.
	DefaultGroupActionInFlight = DefaultGroupActionParallel
)

// GroupActionOptions bound group actions.
type GroupActionOptions struct {
	// Timeout bounds the whole call: a member without a final result by
	// then (also one still waiting for a slot) is timedOut. Default 30 s
	// (as http.proxyTimeout).
	Timeout time.Duration
	// Parallel bounds the members one call invokes at once.
	Parallel int
	// MaxCalls bounds the calls running at once on the hub; beyond it a
	// call is refused (EUNAVAILABLE) before any member is invoked.
	MaxCalls int
	// MaxOutputBytes bounds the members' outputs one call passes on in
	// all: an output beyond it is dropped, its result keeps its status and
	// carries a too-large problem (the JSON answer holds them all at once).
	MaxOutputBytes int
	// MaxHeldBytes bounds the members' outputs all calls on the hub hold
	// at once (groups.actionOutputBytes): MaxCalls × MaxOutputBytes is
	// no bound on a small board. An output beyond what is left is dropped
	// as one beyond MaxOutputBytes is, its problem unavailable (503: try
	// again); outputs are held until the door has passed them on.
	MaxHeldBytes int
	// MaxInFlight bounds the members all calls on the hub invoke at once;
	// the others wait for a place within their call's time.
	MaxInFlight int
}

// GroupActions runs group actions. It is safe for concurrent use.
type GroupActions struct {
	reg    *Registry
	rt     *Router
	access *Access
	opts   GroupActionOptions
	calls  chan struct{}
	flying chan struct{} // places of MaxInFlight

	heldMu sync.Mutex
	held   int // bytes of outputs the calls hold now
}

// hold reserves n bytes of the hub's output budget; false when they are
// not left.
func (ga *GroupActions) hold(n int) bool {
	ga.heldMu.Lock()
	defer ga.heldMu.Unlock()
	if ga.held+n > ga.opts.MaxHeldBytes {
		return false
	}
	ga.held += n
	return true
}

func (ga *GroupActions) unhold(n int) {
	if n == 0 {
		return
	}
	ga.heldMu.Lock()
	ga.held -= n
	ga.heldMu.Unlock()
}

// Held is the bytes of members' outputs the calls on the hub hold now.
func (ga *GroupActions) Held() int {
	ga.heldMu.Lock()
	defer ga.heldMu.Unlock()
	return ga.held
}

// NewGroupActions returns the group-action runner over reg, delivering
// through rt and deciding each member with access (nil: open access).
func NewGroupActions(reg *Registry, rt *Router, access *Access, opts GroupActionOptions) *GroupActions {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultGroupActionParallel
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultGroupActionCalls
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultGroupActionOutput
	}
	if opts.MaxHeldBytes <= 0 {
		opts.MaxHeldBytes = DefaultGroupActionHeld
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultGroupActionInFlight
	}
	if access == nil {
		access = OpenAccess()
	}
	return &GroupActions{reg: reg, rt: rt, access: access, opts: opts, calls: make(chan struct{}, opts.MaxCalls),
		flying: make(chan struct{}, opts.MaxInFlight)}
}

// GroupActionRequest is one group action a consumer asks for.
type GroupActionRequest struct {
	Group, Action string
	// Input is the action input, encoded as ContentType (JSON or CBOR; ""
	// is JSON); nil for none.
	Input       []byte
	ContentType string
	// Accept is the encoding the members' outputs are passed on in.
	Accept string
	// Principal is the consumer: each member is decided for it by the
	// access policy (a refusal is that member's failed result).
	Principal               Principal
	Traceparent, Tracestate string
}

// MemberResult is one member's result of a group action.
type MemberResult struct {
	Member string
	// Status is one of lmos.GroupResult*.
	Status string
	// Output is the member's output (completed), in the request's Accept.
	Output      []byte
	ContentType string
	// Problem says why it failed, timed out or is offline (or that a
	// completed member's output was dropped, too large).
	Problem *lmos.Problem
}

// GroupCall is a group action that passed its checks and holds a slot of
// the hub's calls: Run it, or Release it.
type GroupCall struct {
	ga      *GroupActions
	req     GroupActionRequest
	members []string
	done    bool
	// keep: the door holds the outputs after emit returns (it answers
	// once all are in); Release gives them back. Otherwise each output is
	// given back when emit returns.
	keep bool
	held int
}

// Prepare checks a group action: the group exists (ENOTFOUND), some member
// has the action (ENOTFOUND otherwise, also for an empty group), and the
// hub has room for one more call (EUNAVAILABLE). Nothing is invoked yet.
func (ga *GroupActions) Prepare(req GroupActionRequest) (*GroupCall, error) {
	g, err := ga.reg.Group(req.Group)
	if err != nil {
		return nil, err
	}
	members := g.MemberIDs()
	has := false
	for _, id := range members {
		if t, err := ga.reg.Get(id); err == nil && t.Summary != nil && t.Summary.HasAffordance("actions", req.Action) {
			has = true
			break
		}
	}
	if !has {
		return nil, Errorf(ENOTFOUND, "no member of group %q has action %q", req.Group, req.Action)
	}
	select {
	case ga.calls <- struct{}{}:
	default:
		return nil, Errorf(EUNAVAILABLE, "too many group actions in progress (at most %d)", ga.opts.MaxCalls)
	}
	return &GroupCall{ga: ga, req: req, members: members}, nil
}

// Members are the member ids the call covers, sorted.
func (c *GroupCall) Members() []string { return c.members }

// SetInput sets the action input (encoded as ct), read by the door after
// Prepare: a request for an unknown group is 404 whatever its body.
func (c *GroupCall) SetInput(input []byte, ct string) { c.req.Input, c.req.ContentType = input, ct }

// KeepOutputs makes the outputs Run passes on stay held (counted in the
// hub's budget) after emit returns, until Release: for a door that answers
// with all results at once.
func (c *GroupCall) KeepOutputs() { c.keep = true }

// Release gives the call's slot back without running it (Run does it
// too) and the outputs it keeps.
func (c *GroupCall) Release() {
	c.releaseSlot()
	c.ga.unhold(c.held)
	c.held = 0
}

func (c *GroupCall) releaseSlot() {
	if !c.done {
		c.done = true
		<-c.ga.calls
	}
}

// Run invokes the action on every member that has it, at most Parallel at
// once, and calls emit with each member's result as it comes, from this
// goroutine, exactly once per member. It returns when every member has a
// result: within the call's timeout (or once ctx ends: the members left
// are timedOut).
func (c *GroupCall) Run(ctx context.Context, emit func(MemberResult)) lmos.GroupActionSummary {
	defer c.releaseSlot()
	ga, req := c.ga, c.req
	sum := lmos.GroupActionSummary{Group: req.Group, Action: req.Action}
	ctx, cancel := context.WithTimeout(ctx, ga.opts.Timeout)
	defer cancel()
	pass := func(a admitted) {
		sum.Count(a.r.Status)
		emit(a.r)
		if c.keep {
			c.held += a.n
		} else {
			ga.unhold(a.n)
		}
	}
	todo := c.invocable(func(r MemberResult) { pass(admitted{r: r}) })
	results := make(chan admitted, len(todo))
	go c.invokeAll(ctx, todo, results)
	for range todo {
		pass(<-results)
	}
	return sum
}

// admitted is a member's result with the bytes of its output held of the
// hub's budget.
type admitted struct {
	r MemberResult
	n int // bytes held
}

// invocable are the members to invoke: the others (left the directory
// since, without the action, or refused to the consumer) are passed to
// skip with their result at once.
func (c *GroupCall) invocable(skip func(MemberResult)) []string {
	ga := c.ga
	p := ga.principal(c.req.Principal)
	var todo []string
	for _, id := range c.members {
		t, err := ga.reg.Get(id)
		if err != nil || t.Summary == nil || !t.Summary.HasAffordance("actions", c.req.Action) {
			// Left the directory since, or has no such action: nothing to do.
			skip(MemberResult{Member: id, Status: lmos.GroupResultSkipped})
			continue
		}
		if err := ga.access.Allow(p, OpInvokeAction, &t); err != nil {
			skip(failedResult(id, err))
			continue
		}
		todo = append(todo, id)
	}
	return todo
}

// invokeAll invokes every member of todo, at most Parallel of the call's
// and MaxInFlight of the hub's at once, and sends each one's result to
// results; a member still waiting for a place when ctx ends is timedOut.
func (c *GroupCall) invokeAll(ctx context.Context, todo []string, results chan<- admitted) {
	ga, req := c.ga, c.req
	budget := &outputBudget{ga: ga, left: ga.opts.MaxOutputBytes}
	slots := make(chan struct{}, ga.opts.Parallel)
	for _, id := range todo {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			results <- admitted{r: timedOut(id, ctx.Err())}
			continue
		}
		select { // a place of the hub's, after one of the call's
		case ga.flying <- struct{}{}:
		case <-ctx.Done():
			<-slots
			results <- admitted{r: timedOut(id, ctx.Err())}
			continue
		}
		go func() {
			defer func() { <-ga.flying; <-slots }()
			r, n := budget.admit(ga.invoke(ctx, req, id))
			results <- admitted{r, n}
		}()
	}
}

// outputBudget admits a call's outputs (counted against the call's limit
// and held of the hub's budget) as they arrive, before they wait to be
// passed on: a door slow to take results must not hold more than the
// budget.
type outputBudget struct {
	ga   *GroupActions
	mu   sync.Mutex
	left int // of the call's MaxOutputBytes
}

// admit holds r's output, or drops it and says why in r's problem; n is
// the bytes held.
func (b *outputBudget) admit(r MemberResult) (_ MemberResult, n int) {
	n = len(r.Output)
	if n == 0 {
		return r, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ga := b.ga
	switch {
	case n > b.left:
		p := ProblemOf(Errorf(ETOOLARGE, "the output of member %q (%d bytes) is beyond what is left of the group action's output limit (%d bytes of %d); the member completed", r.Member, n, b.left, ga.opts.MaxOutputBytes))
		r.Output, r.Problem = nil, &p
		return r, 0
	case !ga.hold(n):
		p := ProblemOf(Errorf(EUNAVAILABLE, "the hub holds as many group-action outputs as it may (groups.actionOutputBytes, %d bytes): the output of member %q (%d bytes) is dropped; the member completed; try again later", ga.opts.MaxHeldBytes, r.Member, n))
		r.Output, r.Problem = nil, &p
		return r, 0
	}
	b.left -= n
	return r, n
}

// principal is p with a Thing's Admitted read now (an approval may have
// come since its connection authenticated); a Thing no longer registered
// is anonymous.
func (ga *GroupActions) principal(p Principal) Principal {
	if p.Kind != ByThing {
		return p
	}
	t, err := ga.reg.Get(p.ThingID)
	if err != nil {
		return AnonymousFrom(p.Source)
	}
	p.Admitted = t.Meta.Admitted
	return p
}

// invoke runs the action on one member through the Router and turns the
// outcome into its result.
func (ga *GroupActions) invoke(ctx context.Context, req GroupActionRequest, id string) MemberResult {
	in := Interaction{ThingID: id, Op: OpInvokeAction, Name: req.Action, Input: req.Input, ContentType: req.ContentType,
		Accept: req.Accept, Traceparent: req.Traceparent, Tracestate: req.Tracestate}
	var final Result
	err := ga.rt.Deliver(ctx, in, func(res Result) error {
		if res.Final() {
			final = res
		}
		return nil // partial results of a member are not passed on
	})
	switch {
	case err != nil && (ErrorCode(err) == ETIMEOUT || ctx.Err() != nil && errors.Is(err, ctx.Err())):
		return timedOut(id, err)
	case err != nil && ErrorCode(err) == EUNAVAILABLE:
		p := ProblemOf(err)
		return MemberResult{Member: id, Status: lmos.GroupResultOffline, Problem: &p}
	case err != nil:
		return failedResult(id, err)
	case final.Status == StatusFailed:
		p := ThingProblem(final.Problem)
		return MemberResult{Member: id, Status: lmos.GroupResultFailed, Problem: &p}
	}
	return MemberResult{Member: id, Status: lmos.GroupResultCompleted, Output: final.Data, ContentType: final.ContentType}
}

func failedResult(id string, err error) MemberResult {
	p := ProblemOf(err)
	return MemberResult{Member: id, Status: lmos.GroupResultFailed, Problem: &p}
}

func timedOut(id string, err error) MemberResult {
	p := ProblemOf(&Error{Code: ETIMEOUT, Message: fmt.Sprintf("member %q gave no final result in time", id), Err: err})
	return MemberResult{Member: id, Status: lmos.GroupResultTimedOut, Problem: &p}
}
