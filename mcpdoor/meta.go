package mcpdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The door's own tools (PROTOCOL §11.3): clients drop or cut long tool
// lists, so with more Things than the list shows a model searches with
// find_tools and calls what it found by name, or with call_tool by Thing
// and action.

const (
	defaultFindLimit = 10
	maxFindLimit     = 50
)

func findToolsTool(maxListed int) *mcp.Tool {
	return &mcp.Tool{
		Name:  findToolsName,
		Title: "Find tools of the hub's agents and Things",
		Description: fmt.Sprintf("Searches the agents and Things registered on this LMOS hub by what they can do "+
			"(their titles, descriptions, capabilities and actions) and returns their tools, best match first, each with "+
			"its name, description and input schema. The tool list shows every tool only while there are at most %d; "+
			"find the others here, then call them by name or with call_tool.", maxListed),
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"query": map[string]any{"type": "string", "minLength": 1, "description": "Words describing what you need, e.g. \"set temperature living room\"."},
				"type":  map[string]any{"type": "string", "description": "Only Things of this @type, e.g. \"Agent\" or \"Tool\"."},
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": maxFindLimit, "description": "How many Things at most (default 10)."},
			},
			"required":             []any{"query"},
			"additionalProperties": false,
		},
		OutputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"tools": map[string]any{"type": "array", "items": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"name":        map[string]any{"type": "string"},
						"title":       map[string]any{"type": "string"},
						"description": map[string]any{"type": "string"},
						"thing":       map[string]any{"type": "string"},
						"group":       map[string]any{"type": "string"},
						"action":      map[string]any{"type": "string"},
						"inputSchema": map[string]any{"type": "object"},
					},
					"required": []any{"name", "action", "inputSchema"},
				}},
			},
			"required": []any{"tools"},
		},
		Annotations: &mcp.ToolAnnotations{Title: "Find tools", ReadOnlyHint: true, IdempotentHint: true},
	}
}

func callToolTool() *mcp.Tool {
	no := false
	return &mcp.Tool{
		Name:  callToolName,
		Title: "Call an action of a Thing, or read a property",
		Description: "Invokes an action of a Thing registered on this LMOS hub, by the Thing's id and the action's name " +
			"(find them with find_tools), with the action's input as it is (not wrapped); or, with property instead of " +
			"action, reads a property's value.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"thing":    map[string]any{"type": "string", "minLength": 1, "description": "The Thing's id."},
				"action":   map[string]any{"type": "string", "minLength": 1, "description": "The action to invoke."},
				"property": map[string]any{"type": "string", "minLength": 1, "description": "The property to read (instead of an action)."},
				"input":    map[string]any{"description": "The action's input."},
			},
			"required":             []any{"thing"},
			"additionalProperties": false,
		},
		Annotations: &mcp.ToolAnnotations{Title: "Call a Thing", DestructiveHint: &no},
	}
}

func (d *Door) addMetaTools() {
	d.srv.AddTool(findToolsTool(d.cfg.MaxListed), d.findTools)
	d.srv.AddTool(callToolTool(), d.callTool)
}

type foundTool struct {
	Name        string          `json:"name"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	Thing       string          `json:"thing,omitempty"`
	Group       string          `json:"group,omitempty"`
	Action      string          `json:"action"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

func found(s *spec) foundTool {
	return foundTool{Name: s.name, Title: s.title, Description: s.desc, Thing: s.thing, Group: s.group, Action: s.action, InputSchema: s.in}
}

func (d *Door) findTools(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c := d.callerOf(req.Extra)
	var args struct {
		Query string `json:"query"`
		Type  string `json:"type"`
		Limit int    `json:"limit"`
	}
	if err := strictArgs(req.Params.Arguments, &args); err != nil {
		return toolError(err), nil
	}
	if err := d.access.Allow(c.p, hub.OpReadDirectory, nil); err != nil {
		return toolError(err), nil
	}
	if strings.TrimSpace(args.Query) == "" {
		return toolError(hub.Errorf(hub.EINVALID, "query must name what you need")), nil
	}
	if args.Limit <= 0 {
		args.Limit = defaultFindLimit
	}
	args.Limit = min(args.Limit, maxFindLimit)
	hits, err := d.reg.SearchTextFor(ctx, c.p.Source, args.Query, args.Type, args.Limit)
	if err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
		return toolError(err), nil
	}
	cat := d.catalog()
	out := []foundTool{}
	add := func(name string) {
		if r := cat.byName[name]; d.usable(c.p, r) {
			if s, err := d.specOf(name, r); err == nil { // else it left meanwhile
				out = append(out, found(s))
			}
		}
	}
	for _, h := range hits {
		for _, name := range cat.ofThing[h.ID] {
			add(name)
		}
	}
	// Groups whose title or id has a word of the query.
	if args.Type == "" {
		words := strings.Fields(strings.ToLower(args.Query))
		titles := map[string]string{}
		for _, name := range cat.names {
			r := cat.byName[name]
			if r.group == "" {
				continue
			}
			title, ok := titles[r.group]
			if !ok {
				if g, err := d.reg.Group(r.group); err == nil {
					title = strings.ToLower(g.Title + " " + g.ID)
				}
				titles[r.group] = title
			}
			for _, w := range words {
				if strings.Contains(title, w) {
					add(name)
					break
				}
			}
		}
	}
	return answer(map[string]any{"tools": out}), nil
}

// strictArgs decodes a call's arguments into v, refusing unknown members.
func strictArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return hub.Errorf(hub.EINVALID, "the arguments do not fit the tool's input schema: %v", err)
	}
	return nil
}

func (d *Door) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c := d.callerOf(req.Extra)
	var args struct {
		Thing    string          `json:"thing"`
		Action   string          `json:"action"`
		Property string          `json:"property"`
		Input    json.RawMessage `json:"input"`
	}
	if err := strictArgs(req.Params.Arguments, &args); err != nil {
		return toolError(err), nil
	}
	switch {
	case args.Thing == "":
		return toolError(hub.Errorf(hub.EINVALID, "thing must name a Thing's id")), nil
	case (args.Action == "") == (args.Property == ""):
		return toolError(hub.Errorf(hub.EINVALID, "name either an action or a property")), nil
	case args.Property != "":
		return d.run(func() *mcp.CallToolResult { return d.readProperty(ctx, c, args.Thing, args.Property) }), nil
	}
	t, err := d.reg.Get(args.Thing)
	if err == nil { // who may comes before what the Thing has
		err = d.access.Allow(c.p, hub.OpInvokeAction, &t)
	}
	if err != nil {
		return toolError(err), nil
	}
	s, err := d.specOf(callToolName, &ref{thing: args.Thing, action: args.Action})
	if err != nil {
		return toolError(err), nil
	}
	var input []byte
	if len(args.Input) > 0 && string(args.Input) != "null" {
		input = args.Input
	}
	return d.run(func() *mcp.CallToolResult { return d.invoke(ctx, req, c, s, input) }), nil
}

// readProperty reads a property's value for c, as a tool result.
func (d *Door) readProperty(ctx context.Context, c *caller, thing, name string) *mcp.CallToolResult {
	data, err := d.read(ctx, c, thing, name)
	if err != nil {
		return toolError(err)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(data)}}}
	var v any
	if json.Unmarshal(data, &v) == nil {
		if m, ok := v.(map[string]any); ok {
			res.StructuredContent = m
		}
	}
	return res
}

// read is a readproperty through the Router for c: the value as JSON.
func (d *Door) read(ctx context.Context, c *caller, thing, name string) ([]byte, error) {
	rt := d.cfg.Router
	if rt == nil {
		return nil, hub.Errorf(hub.EUNAVAILABLE, "the hub's interactions are not running")
	}
	in := hub.Interaction{ThingID: thing, Op: hub.OpReadProperty, Name: name, Accept: lmos.MediaJSON, Door: hub.SourceHTTP}
	t, err := d.reg.Get(thing)
	if err == nil {
		err = d.access.Allow(c.p, hub.OpReadProperty, &t)
	}
	if err == nil {
		_, _, err = rt.Check(in)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
	defer cancel()
	var value hub.Result
	if err := rt.Deliver(ctx, in, func(res hub.Result) error { value = res; return nil }); err != nil {
		return nil, err
	}
	if value.Status == hub.StatusFailed {
		p := lmos.Problem{Title: "failed"}
		if value.Problem != nil {
			p = *value.Problem
		}
		return nil, hub.Errorf(hub.EFAILED, "Thing %q could not read property %q: %s", thing, name, problemText(p))
	}
	return value.Data, nil
}
