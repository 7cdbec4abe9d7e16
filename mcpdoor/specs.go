package mcpdoor

import (
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// minCachedThings is the least number of Things whose specs the door
// keeps: a search shows 50, a listing mcp.maxTools (the cache holds as
// many); beyond, a spec is made again from the stored TD (one decoding).
const minCachedThings = 256

// specCache keeps the specs of recently used Things, each for the
// description it was made from.
type specCache struct {
	mu  sync.Mutex
	max int
	m   map[string]*thingSpecs
}

func (c *specCache) get(id string, sum *hub.Summary) *thingSpecs {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.m[id]; ts != nil && ts.sum == sum {
		return ts
	}
	return nil
}

func (c *specCache) put(id string, ts *thingSpecs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*thingSpecs{}
	}
	if _, ok := c.m[id]; !ok && len(c.m) >= c.max {
		for k := range c.m { // any one: map order is random
			delete(c.m, k)
			break
		}
	}
	c.m[id] = ts
}

// thingSpecs are the specs of Thing id's actions, made from its stored TD
// unless the cache has them for its current description.
func (d *Door) thingSpecs(id string) (*thingSpecs, error) {
	t, err := d.reg.Get(id)
	if err != nil {
		return nil, err
	}
	if ts := d.specs.get(id, t.Summary); ts != nil {
		return ts, nil
	}
	doc, err := d.reg.Document(id)
	if err != nil {
		return nil, err
	}
	ts := thingSpecsOf(t, doc)
	d.specs.put(id, ts)
	return ts, nil
}

// specOf is the spec of the tool name stands for, named.
func (d *Door) specOf(name string, r *ref) (*spec, error) {
	var s *spec
	if r.group != "" {
		g, err := d.reg.Group(r.group)
		if err != nil {
			return nil, err
		}
		for _, id := range g.MemberIDs() {
			if ts, err := d.thingSpecs(id); err == nil {
				if m := ts.action(r.action); m != nil {
					s = groupSpec(&g, m)
					break
				}
			}
		}
		if s == nil {
			return nil, hub.Errorf(hub.ENOTFOUND, "no member of group %q has action %q", r.group, r.action)
		}
	} else {
		ts, err := d.thingSpecs(r.thing)
		if err != nil {
			return nil, err
		}
		if s = ts.action(r.action); s == nil {
			return nil, hub.Errorf(hub.ENOTFOUND, "Thing %q has no action %q", r.thing, r.action)
		}
	}
	cp := *s // the cached spec is shared; its name is this listing's
	cp.name = name
	return &cp, nil
}

// mcpTool is the SDK's tool of s.
func (s *spec) mcpTool() *mcp.Tool {
	t := &mcp.Tool{Name: s.name, Title: s.title, Description: s.desc, InputSchema: s.in,
		Annotations: annotations[boolIndex(s.readOnly)*2+boolIndex(s.idempotent)]}
	if s.out != nil {
		t.OutputSchema = s.out
	}
	return t
}

// annotations are the four a tool can have, shared by all tools:
// readOnlyHint from the action's "safe", idempotentHint from its
// "idempotent", destructiveHint unless safe.
var annotations = func() [4]*mcp.ToolAnnotations {
	yes, no := true, false
	return [4]*mcp.ToolAnnotations{
		{DestructiveHint: &yes},
		{DestructiveHint: &yes, IdempotentHint: true},
		{DestructiveHint: &no, ReadOnlyHint: true},
		{DestructiveHint: &no, ReadOnlyHint: true, IdempotentHint: true},
	}
}()

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
