package mcpdoor

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// A client narrows the tools it is shown by the URL it is given
// (PROTOCOL §11.3): /mcp?type=Agent&group=kitchen&jsonpath=… lists the
// tools of the Things that match all of them. A filter narrows the list
// only; any tool the caller may use can still be called.

type filter struct {
	types    []string // any of them
	group    string
	jsonpath string
}

// maxFilterBytes bounds each filter parameter, maxTypes the types one
// filter names.
const (
	maxFilterBytes = 1024
	maxTypes       = 16
)

func parseFilter(q url.Values) (filter, error) {
	var f filter
	for k, vs := range q {
		for _, v := range vs {
			if len(v) > maxFilterBytes {
				return f, fmt.Errorf("the %s parameter is longer than %d bytes", k, maxFilterBytes)
			}
		}
		switch k {
		case "type":
			if len(vs) > maxTypes {
				return f, fmt.Errorf("at most %d type parameters", maxTypes)
			}
			f.types = vs
		case "group":
			f.group = q.Get(k)
		case "jsonpath":
			f.jsonpath = q.Get(k)
		default:
			return f, fmt.Errorf("unknown parameter %q: /mcp takes type, group and jsonpath", k)
		}
	}
	return f, nil
}

func (f filter) empty() bool { return len(f.types) == 0 && f.group == "" && f.jsonpath == "" }

// matcher decides the filter for one listing: the JSONPath query runs once.
type matcher struct {
	f   filter
	reg *hub.Registry
	ids map[string]bool // Things the query selected (jsonpath only)
}

func (f filter) matcher(ctx context.Context, reg *hub.Registry, client string) (*matcher, error) {
	m := &matcher{f: f, reg: reg}
	if f.jsonpath == "" {
		return m, nil
	}
	// The search gates and budgets of /search/jsonpath bound it.
	res, err := reg.SearchJSONPathFor(ctx, client, f.jsonpath)
	if err != nil {
		return nil, fmt.Errorf("the jsonpath filter: %w", err)
	}
	m.ids = map[string]bool{}
	for _, v := range res {
		if td, ok := v.(map[string]any); ok {
			if id, ok := td["id"].(string); ok {
				m.ids[id] = true
			}
		}
	}
	return m, nil
}

// thing reports whether Thing t passes.
func (m *matcher) thing(t *hub.Thing) bool {
	f := m.f
	if m.ids != nil && !m.ids[t.ID] {
		return false
	}
	if f.group != "" && !m.reg.IsMember(f.group, t.ID) {
		return false
	}
	if len(f.types) > 0 {
		ok := false
		for _, want := range f.types {
			w := normType(want)
			if t.Summary != nil && t.Summary.AnyType(func(s string) bool { return normType(s) == w }) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// group reports whether the tools of group gid pass: only a group filter
// names groups.
func (m *matcher) group(gid string) bool {
	return m.f.group == gid || m.f.empty()
}

// normType compares types as the text search does: "Agent" is "lmos:Agent".
func normType(s string) string { return strings.ToLower(strings.TrimPrefix(s, "lmos:")) }
