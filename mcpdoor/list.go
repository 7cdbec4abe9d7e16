package mcpdoor

import (
	"context"
	"sort"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Each client sees the tools and resources it may use (hub.Access), and
// the tools of its filter: the SDK server holds only find_tools and
// call_tool, and middleware answers tools/list, resources/list and the
// Things' and groups' tools/call per caller, from the catalog.

// private is the cache hint of a list made for its caller.
var private = mcp.Cacheable{TTLMs: 0, CacheScope: "private"}

// maxResources bounds resources/list: the TDs beyond are read by URI.
const maxResources = 1000

func (d *Door) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			tools, err := d.listTools(ctx, d.callerOf(req.GetExtra()))
			if err != nil {
				return nil, err
			}
			// Each caller's list is its own: private, and never fresh
			// (a Thing may join any moment).
			return &mcp.ListToolsResult{Tools: tools, Cacheable: private}, nil
		case "resources/list":
			res, err := d.listResources(ctx, d.callerOf(req.GetExtra()))
			if err != nil {
				return nil, err
			}
			return &mcp.ListResourcesResult{Resources: res, Cacheable: private}, nil
		case "tools/call":
			// The Things' and groups' tools are the door's own (see
			// announceTools); find_tools and call_tool are the SDK's.
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				name := r.Params.Name
				if ref := d.catalog().byName[name]; ref != nil {
					return d.callRef(ctx, r, name, ref), nil
				}
				if why := d.goneTool(name); why != "" {
					return toolError(hub.Errorf(hub.ENOTFOUND, "unknown tool %q: %s", name, why)), nil
				}
			}
		}
		return next(ctx, method, req)
	}
}

// goneTool says why a tool that is not there went ("": not one that went).
func (d *Door) goneTool(name string) string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.cat.byName[name] != nil {
		return ""
	}
	return d.gone[name]
}

// listTools is tools/list for c: find_tools and call_tool for a caller
// who may read the directory, then the Thing and group tools c may call
// and its filter keeps, when they are at most MaxListed.
func (d *Door) listTools(ctx context.Context, c *caller) ([]*mcp.Tool, error) {
	if d.access.Allow(c.p, hub.OpReadDirectory, nil) != nil {
		return []*mcp.Tool{}, nil
	}
	tools := []*mcp.Tool{findToolsTool(d.cfg.MaxListed), callToolTool()}
	m, err := c.filter.matcher(ctx, d.reg, c.p.Source)
	if err != nil {
		return nil, filterError(err)
	}
	cat := d.catalog()
	var listed []string
	for _, name := range cat.names {
		r := cat.byName[name]
		if !d.usable(c.p, r) || !m.ref(r) {
			continue
		}
		if len(listed) == d.cfg.MaxListed {
			return tools, nil // too many: find_tools finds them
		}
		listed = append(listed, name)
	}
	for _, name := range listed {
		if s, err := d.specOf(name, cat.byName[name]); err == nil { // else it left meanwhile
			tools = append(tools, s.mcpTool())
		}
	}
	return tools, nil
}

// usable reports whether p may call the tool r stands for.
func (d *Door) usable(p hub.Principal, r *ref) bool {
	if r.group != "" {
		return d.access.Allow(p, hub.OpInvokeAction, nil) == nil
	}
	t, err := d.reg.Get(r.thing)
	return err == nil && d.access.Allow(p, hub.OpInvokeAction, &t) == nil
}

// ref reports whether the filter keeps the tool r stands for.
func (m *matcher) ref(r *ref) bool {
	if r.group != "" {
		return m.group(r.group)
	}
	t, err := m.reg.Get(r.thing)
	return err == nil && m.thing(&t)
}

// listResources is resources/list for c: the TDs it may read and its
// filter keeps, by title.
func (d *Door) listResources(ctx context.Context, c *caller) ([]*mcp.Resource, error) {
	out := []*mcp.Resource{}
	if d.access.Allow(c.p, hub.OpReadDirectory, nil) != nil {
		return out, nil
	}
	m, err := c.filter.matcher(ctx, d.reg, c.p.Source)
	if err != nil {
		return nil, filterError(err)
	}
	cat := d.catalog()
	things, _ := d.reg.List(0, 0)
	for _, t := range things {
		if len(out) == maxResources {
			break
		}
		if d.access.Allow(c.p, hub.OpReadDirectory, t) != nil || !m.thing(t) {
			continue
		}
		title := t.ID
		if ts := cat.things[t.ID]; ts != nil && ts.title != "" {
			title = ts.title
		}
		out = append(out, thingResource(t.ID, title))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URI < out[j].URI })
	return out, nil
}

// filterError is the protocol's error for a filter that failed: invalid
// params for a bad query, an internal error for a search over its limits.
func filterError(err error) error {
	code := int64(jsonrpc.CodeInvalidParams)
	if hub.ErrorCode(err) != hub.EINVALID {
		code = jsonrpc.CodeInternalError
	}
	return &jsonrpc.Error{Code: code, Message: err.Error()}
}
