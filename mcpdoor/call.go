package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A tool call is an invokeaction through the hub's Router, as a call
// through the HTTP proxy is (PROTOCOL §11.4): the input is checked against
// the action's schema, partial results are progress notifications, the
// final result is structured content and text, and every failure — the
// Thing's, the hub's, the input's — is a tool error carrying its problem,
// which the model can read and act on.

// callRef calls the tool name, which r stands for.
func (d *Door) callRef(ctx context.Context, req *mcp.CallToolRequest, name string, r *ref) *mcp.CallToolResult {
	refused := func(err error) *mcp.CallToolResult {
		d.stats.call(outcomeToolError)
		return toolError(err)
	}
	s, err := d.specOf(name, r)
	if err != nil {
		return refused(err)
	}
	c := d.callerOf(req.Extra)
	// Who may comes first: a refused client learns nothing of the tool's
	// input.
	if err := d.mayInvoke(c.p, s); err != nil {
		return refused(err)
	}
	input, err := unwrapInput(req.Params.Arguments, s.inWrapped, s.noInput)
	if err == nil && s.chat {
		input, err = conversation(input)
	}
	if err != nil {
		return refused(err)
	}
	if s.group != "" {
		return d.run(func() *mcp.CallToolResult { return d.invokeGroup(ctx, req, c, s, input) })
	}
	return d.run(func() *mcp.CallToolResult { return d.invoke(ctx, req, c, s, input) })
}

// mayInvoke decides whether p may call s (invoke and invokeGroup decide
// again, for the Thing as it is then).
func (d *Door) mayInvoke(p hub.Principal, s *spec) error {
	if s.group != "" {
		return d.access.Allow(p, hub.OpInvokeAction, nil)
	}
	t, err := d.reg.Get(s.thing)
	if err != nil {
		return err
	}
	return d.access.Allow(p, hub.OpInvokeAction, &t)
}

// run runs one call in a slot of mcp.maxCalls, and counts its outcome.
func (d *Door) run(call func() *mcp.CallToolResult) *mcp.CallToolResult {
	if !d.slot() {
		d.stats.call(outcomeBusy)
		return toolError(d.busy())
	}
	defer d.release()
	res := call()
	if res.IsError {
		d.stats.call(outcomeToolError)
	} else {
		d.stats.call(outcomeOK)
	}
	return res
}

// unwrapInput is the action input of a call's arguments: the "input"
// member of a wrapped one, none for an action without input, else the
// arguments as they are.
func unwrapInput(args json.RawMessage, wrapped, noInput bool) ([]byte, error) {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		if wrapped {
			return nil, hub.Errorf(hub.EINVALID, "the arguments must be an object with member %q (the action's input)", wrapKey)
		}
		args = []byte("{}")
	}
	if args[0] != '{' {
		return nil, hub.Errorf(hub.EINVALID, "the arguments must be a JSON object")
	}
	if !wrapped {
		if noInput {
			var m map[string]json.RawMessage
			if json.Unmarshal(args, &m) != nil || len(m) > 0 {
				return nil, hub.Errorf(hub.EINVALID, "the action takes no input: call it with {}")
			}
			return nil, nil
		}
		return args, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, hub.Errorf(hub.EINVALID, "the arguments are not a JSON object: %v", err)
	}
	in, ok := m[wrapKey]
	if !ok || len(m) != 1 {
		return nil, hub.Errorf(hub.EINVALID, "the arguments must be an object with only member %q (the action's input)", wrapKey)
	}
	return in, nil
}

// conversation turns a conversational tool's {"message"} into the
// action's input: a conversation of that one user message.
func conversation(args []byte) ([]byte, error) {
	var m struct {
		Message string `json:"message"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || m.Message == "" {
		return nil, hub.Errorf(hub.EINVALID, "the arguments must be {\"message\": \"<what to say>\"}")
	}
	return json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": m.Message}}})
}

// slot takes one of the door's call slots; false when all are taken.
func (d *Door) slot() bool {
	select {
	case d.calls <- struct{}{}:
		return true
	default:
		return false
	}
}

func (d *Door) release() { <-d.calls }

// busy is the refusal of a call that found every slot taken.
func (d *Door) busy() error {
	return hub.Errorf(hub.EUNAVAILABLE, "the hub is running as many MCP calls as it takes at once (mcp.maxCalls: %d); try again in a moment", d.cfg.MaxCalls)
}

// invoke invokes a Thing's action for c.
func (d *Door) invoke(ctx context.Context, req *mcp.CallToolRequest, c *caller, s *spec, input []byte) *mcp.CallToolResult {
	rt := d.cfg.Router
	if rt == nil {
		return toolError(hub.Errorf(hub.EUNAVAILABLE, "the hub's interactions are not running"))
	}
	in := hub.Interaction{ThingID: s.thing, Op: hub.OpInvokeAction, Name: s.action, Accept: lmos.MediaJSON,
		Door: hub.SourceHTTP, Input: input, ContentType: lmos.MediaJSON}
	// Who may comes first: a client without the right learns no more
	// of the Thing (whether it is online, what its input takes).
	t, err := d.reg.Get(s.thing)
	if err == nil {
		err = d.access.Allow(c.p, hub.OpInvokeAction, &t)
	}
	if err == nil {
		err = rt.Validate(in)
	}
	if err != nil {
		return toolError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
	defer cancel()
	progress := progressOf(ctx, req)
	var final hub.Result
	err = rt.Deliver(ctx, in, func(res hub.Result) error {
		if res.Final() {
			final = res
			return nil
		}
		progress(res.Status, res.Data)
		return nil
	})
	if err != nil {
		return toolError(err)
	}
	if final.Status == hub.StatusFailed {
		return agentError(s, final.Problem)
	}
	return d.output(s, final.Data)
}

// progressOf returns what reports a partial result to the caller: a
// progress notification when the request asked for them (a progress
// token), nothing otherwise.
func progressOf(ctx context.Context, req *mcp.CallToolRequest) func(status string, data []byte) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return func(string, []byte) {}
	}
	n := 0
	return func(status string, data []byte) {
		n++
		msg := status
		if len(data) > 0 {
			msg = clip(string(data), maxProgressMessage)
		}
		// A client gone or slow is the call's ctx's business.
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: msg})
	}
}

// maxProgressMessage bounds a progress notification's message.
const maxProgressMessage = 16 << 10

// output is the result of a completed call whose output is data (JSON).
func (d *Door) output(s *spec, data []byte) *mcp.CallToolResult {
	data = bytes.TrimSpace(data)
	text := string(data)
	if len(data) == 0 {
		text = "completed"
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	var value any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &value); err != nil {
			return toolError(hub.Errorf(hub.EINTERNAL, "the Thing's output is not JSON: %v", err))
		}
	}
	if s.outWrapped {
		value = map[string]any{resultKey: value}
	}
	if s.out != nil {
		if err := s.checkOutput(value); err != nil {
			return toolError(hub.Errorf(hub.EFAILED, "the output of Thing %q does not match the output schema of its action %q: %v; the output was: %s",
				s.thing, s.action, err, clip(text, 4096)))
		}
	}
	if _, ok := value.(map[string]any); ok {
		res.StructuredContent = value
	}
	return res
}

// checkOutput validates v against the tool's outputSchema, which a client
// checks structured content against too.
func (s *spec) checkOutput(v any) error {
	c := s.check
	c.once.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(s.out))
		if err == nil {
			comp := jsonschema.NewCompiler()
			if err = comp.AddResource("mem:///output.json", doc); err == nil {
				c.schema, err = comp.Compile("mem:///output.json")
			}
		}
		c.err = err
	})
	if c.err != nil {
		return nil // a schema the hub cannot compile checks nothing
	}
	b, _ := json.Marshal(v)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if err := c.schema.Validate(inst); err != nil {
		return fmt.Errorf("%s", firstLine(err.Error()))
	}
	return nil
}

func firstLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	return clip(s, 512)
}

// toolError is a tool result carrying err's problem: its message for the
// model, and the problem itself as JSON.
func toolError(err error) *mcp.CallToolResult {
	p := hub.ProblemOf(err)
	return problemResult(p.Detail, p)
}

// agentError is the tool error of a Thing's failed result.
func agentError(s *spec, p *lmos.Problem) *mcp.CallToolResult {
	if p == nil {
		p = &lmos.Problem{Title: "failed", Detail: "the Thing reported a failure without a problem"}
	}
	msg := fmt.Sprintf("Thing %q failed action %q: %s", s.thing, s.action, problemText(*p))
	return problemResult(msg, *p)
}

func problemText(p lmos.Problem) string {
	if p.Detail != "" {
		return p.Detail
	}
	return p.Title
}

func problemResult(msg string, p lmos.Problem) *mcp.CallToolResult {
	if msg == "" {
		msg = p.Title
	}
	b, _ := json.Marshal(p)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{
		&mcp.TextContent{Text: msg},
		&mcp.TextContent{Text: string(b)},
	}}
}

// invokeGroup runs a group's action for c; each member's result is a
// progress notification as it comes, and the answer lists them all.
func (d *Door) invokeGroup(ctx context.Context, req *mcp.CallToolRequest, c *caller, s *spec, input []byte) *mcp.CallToolResult {
	ga := d.cfg.GroupActions
	if ga == nil {
		return toolError(hub.Errorf(hub.EUNAVAILABLE, "group actions are not running"))
	}
	if err := d.access.Allow(c.p, hub.OpInvokeAction, nil); err != nil {
		return toolError(err)
	}
	call, err := ga.Prepare(hub.GroupActionRequest{Group: s.group, Action: s.action, Accept: lmos.MediaJSON, Principal: c.p})
	if err != nil {
		return toolError(err)
	}
	defer call.Release()
	if input != nil {
		call.SetInput(input, lmos.MediaJSON)
	}
	call.KeepOutputs()
	progress := progressOf(ctx, req)
	type result struct {
		Member string        `json:"member"`
		Status string        `json:"status"`
		Output any           `json:"output,omitempty"`
		Error  *lmos.Problem `json:"error,omitempty"`
	}
	results := []result{}
	call.Run(ctx, func(r hub.MemberResult) {
		var out any
		if len(r.Output) > 0 && json.Unmarshal(r.Output, &out) != nil {
			out = string(r.Output)
		}
		results = append(results, result{Member: r.Member, Status: r.Status, Output: out, Error: r.Problem})
		progress(r.Member+": "+r.Status, nil)
	})
	slices.SortFunc(results, func(a, b result) int { return strings.Compare(a.Member, b.Member) })
	return answer(map[string]any{"group": s.group, "action": s.action, "results": results})
}

// answer is the result of one of the door's own answers v (an object):
// its JSON as structured content and as text.
func answer(v any) *mcp.CallToolResult {
	b, _ := json.Marshal(v)
	var structured map[string]any
	_ = json.Unmarshal(b, &structured)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: structured}
}
