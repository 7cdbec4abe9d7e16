package archtest

import (
	"slices"
	"strings"
	"testing"
)

// synthetic builds a graph of module m from "from: to to" lines; paths
// without a dot are the module's, the rest standard library.
func synthetic(edges map[string][]string) *graph {
	const m = "example.com/m"
	full := func(p string) string {
		if p == "." {
			return m
		}
		if strings.HasPrefix(p, "net") || strings.HasPrefix(p, "std/") {
			return p
		}
		return m + "/" + p
	}
	g := &graph{module: m, imports: map[string][]string{}}
	for from, tos := range edges {
		var imps []string
		for _, to := range tos {
			imps = append(imps, full(to))
			if _, ok := g.imports[full(to)]; !ok && !strings.HasPrefix(to, "net") {
				g.imports[full(to)] = nil
			}
		}
		g.imports[full(from)] = append(g.imports[full(from)], imps...)
	}
	g.fileOf = func(pkg, imp string) string { return strings.TrimPrefix(pkg, m+"/") + "/x.go" }
	return g
}

// TestRulesOnAKnownGraph proves each rule finds the crossings planted in a
// small module and lets the allowed arrows pass: adapters and the agent may
// use hub's neighbours (lmos, internal/*); an adapter's own subpackages are
// the same adapter; cmd and test packages wire anything; net/netip is not
// net.
func TestRulesOnAKnownGraph(t *testing.T) {
	g := synthetic(map[string][]string{
		"hub":              {"lmos", "internal/json", "std/netip"},
		"hub/sub":          {"internal/codec"},
		"internal/codec":   {"net/http/httptest"},
		"internal/json":    nil,
		"lmos":             {"net/http"}, // the wire package is not judged
		"store":            {"hub"},
		"web":              {"hub", "web/ws", "internal/bridge", "net/http"},
		"web/ws":           {"hub", "mqtt"},
		"internal/bridge":  {"store"},
		"mqtt":             {"hub", "internal/ratelimit", "net"},
		"mdns":             {"hub", "internal/dnssd", "net"},
		"internal/dnssd":   {"net"},
		"agent":            {"lmos", "internal/dnssd", "agent/link"},
		"agent/link":       {"internal/leak"},
		"internal/leak":    {"mdns"},
		"cmd/app":          {"hub", "web", "mqtt", "store", "mdns"},
		"test/e2e":         {"web", "mqtt"},
		"examples/thing":   {"agent"},
		"test/kit/hubtest": {"web", "mqtt", "store"},
	})
	check := func(name string, got, want []string) {
		t.Helper()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got  %q\n want %q", name, got, want)
		}
	}
	check("adapters", g.adapterViolations(), []string{
		"adapter web depends on adapter mqtt: web (web/x.go) → web/ws (web/ws/x.go) → mqtt",
		"adapter web depends on adapter mqtt: web/ws (web/ws/x.go) → mqtt",
		"adapter web depends on adapter store: web (web/x.go) → internal/bridge (internal/bridge/x.go) → store",
	})
	check("domain adapters", g.domainAdapterViolations(), nil)
	check("domain net", g.domainNetViolations(), []string{
		"the domain imports net/http/httptest: hub/sub (hub/sub/x.go) → internal/codec (internal/codec/x.go) → net/http/httptest",
	})
	check("agent", g.agentViolations(), []string{
		"the agent library depends on adapter mdns: agent (agent/x.go) → agent/link (agent/link/x.go) → internal/leak (internal/leak/x.go) → mdns",
		"the agent library depends on adapter mdns: agent/link (agent/link/x.go) → internal/leak (internal/leak/x.go) → mdns",
		"the agent library depends on the domain: agent (agent/x.go) → agent/link (agent/link/x.go) → internal/leak (internal/leak/x.go) → mdns (mdns/x.go) → hub",
		"the agent library depends on the domain: agent/link (agent/link/x.go) → internal/leak (internal/leak/x.go) → mdns (mdns/x.go) → hub",
	})

	g = synthetic(map[string][]string{
		"hub":   {"net", "store"},
		"store": {"hub"},
	})
	check("domain adapters", g.domainAdapterViolations(), []string{
		"the domain depends on adapter store: hub (hub/x.go) → store",
	})
	check("domain net", g.domainNetViolations(), []string{
		"the domain imports net: hub (hub/x.go) → net",
	})
}
