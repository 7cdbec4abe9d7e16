package hub

import (
	"context"
	"errors"
	"fmt"
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
}

// GroupActions runs group actions. It is safe for concurrent use.
type GroupActions struct {
	reg    *Registry
	rt     *Router
	access *Access
	opts   GroupActionOptions
	calls  chan struct{}
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
	if access == nil {
		access = OpenAccess()
	}
	return &GroupActions{reg: reg, rt: rt, access: access, opts: opts, calls: make(chan struct{}, opts.MaxCalls)}
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

// Release gives the call's slot back without running it; Run does it too.
func (c *GroupCall) Release() {
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
	defer c.Release()
	ga, req := c.ga, c.req
	sum := lmos.GroupActionSummary{Group: req.Group, Action: req.Action}
	ctx, cancel := context.WithTimeout(ctx, ga.opts.Timeout)
	defer cancel()
	budget := ga.opts.MaxOutputBytes
	pass := func(r MemberResult) {
		if len(r.Output) > 0 {
			if len(r.Output) > budget {
				p := ProblemOf(Errorf(ETOOLARGE, "the output of member %q (%d bytes) is beyond what is left of the group action's output limit (%d bytes of %d); the member completed", r.Member, len(r.Output), budget, ga.opts.MaxOutputBytes))
				r.Output, r.Problem = nil, &p
			} else {
				budget -= len(r.Output)
			}
		}
		sum.Count(r.Status)
		emit(r)
	}
	p := ga.principal(req.Principal)
	var todo []string
	for _, id := range c.members {
		t, err := ga.reg.Get(id)
		if err != nil || t.Summary == nil || !t.Summary.HasAffordance("actions", req.Action) {
			// Left the directory since, or has no such action: nothing to do.
			pass(MemberResult{Member: id, Status: lmos.GroupResultSkipped})
			continue
		}
		if err := ga.access.Allow(p, OpInvokeAction, &t); err != nil {
			pass(failedResult(id, err))
			continue
		}
		todo = append(todo, id)
	}
	results := make(chan MemberResult, len(todo))
	slots := make(chan struct{}, ga.opts.Parallel)
	go func() {
		for _, id := range todo {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				results <- timedOut(id, ctx.Err())
				continue
			}
			go func() {
				defer func() { <-slots }()
				results <- ga.invoke(ctx, req, id)
			}()
		}
	}()
	for range todo {
		pass(<-results)
	}
	return sum
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
