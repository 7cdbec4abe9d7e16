package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// graph is the non-test import graph of the module's packages.
type graph struct {
	module  string
	imports map[string][]string // import path → direct imports
	// fileOf names the file of pkg that imports imp ("" when unknown).
	fileOf func(pkg, imp string) string
}

// listed is what `go list -json` reports of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	Module     *struct {
		Path string
		Main bool
	}
}

// load lists the module the test runs in.
func load(t *testing.T) *graph {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", stderrOf(err))
	}
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./...: %v", stderrOf(err))
	}
	g := &graph{imports: map[string][]string{}}
	pkgs := map[string]listed{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		if p.Module != nil && p.Module.Main {
			g.module = p.Module.Path
		}
		pkgs[p.ImportPath] = p
		g.imports[p.ImportPath] = p.Imports
	}
	if g.module == "" {
		t.Fatal("go list reported no package of the main module")
	}
	g.fileOf = func(pkg, imp string) string {
		p := pkgs[pkg]
		for _, name := range append(slices.Clone(p.GoFiles), p.CgoFiles...) {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				continue
			}
			for _, s := range f.Imports {
				if v, _ := strconv.Unquote(s.Path.Value); v == imp {
					rel, err := filepath.Rel(cmd.Dir, path)
					if err != nil {
						return path
					}
					return filepath.ToSlash(rel)
				}
			}
		}
		return ""
	}
	return g
}

func stderrOf(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

// rel is pkg relative to the module ("" for a package outside it, "." for
// the module's root package).
func (g *graph) rel(pkg string) string {
	if pkg == g.module {
		return "."
	}
	if r, ok := strings.CutPrefix(pkg, g.module+"/"); ok {
		return r
	}
	return ""
}

// top is the top-level directory of a module package ("" outside it).
func (g *graph) top(pkg string) string {
	r := g.rel(pkg)
	top, _, _ := strings.Cut(r, "/")
	return top
}

// notAdapters are the top-level directories that hold no adapter.
var notAdapters = []string{"hub", "lmos", "internal", "app", "agent", "examples", "cmd", "test"}

// adapter names the adapter pkg belongs to, or "" when it is not one.
func (g *graph) adapter(pkg string) string {
	top := g.top(pkg)
	if top == "" || slices.Contains(notAdapters, top) {
		return ""
	}
	return top
}

// packages lists the module's packages under the top-level directory top.
func (g *graph) packages(top string) []string {
	var out []string
	for p := range g.imports {
		if g.top(p) == top {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// reach walks the module packages from start, shortest chains first, and
// returns the chain to every package it reaches (start included). follow
// says whether to walk on from a reached package.
func (g *graph) reach(start string, follow func(pkg string) bool) map[string][]string {
	chains := map[string][]string{start: {start}}
	queue := []string{start}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != start && !follow(p) {
			continue
		}
		imps := slices.Clone(g.imports[p])
		slices.Sort(imps)
		for _, imp := range imps {
			if _, seen := chains[imp]; seen || g.rel(imp) == "" {
				continue
			}
			chains[imp] = append(slices.Clone(chains[p]), imp)
			queue = append(queue, imp)
		}
	}
	return chains
}

// describe writes a chain as "agent (agent/hub.go) → mdns (mdns/x.go) →
// hub": each step with the file that makes the next import.
func (g *graph) describe(chain []string) string {
	var b strings.Builder
	for i, p := range chain {
		if i > 0 {
			b.WriteString(" → ")
		}
		if r := g.rel(p); r != "" {
			b.WriteString(r)
		} else {
			b.WriteString(p)
		}
		if i+1 < len(chain) {
			if f := g.fileOf(p, chain[i+1]); f != "" {
				fmt.Fprintf(&b, " (%s)", f)
			}
		}
	}
	return b.String()
}

// adapterViolations: an adapter reaches a package of another adapter. The
// walk stops at the first foreign adapter, so each chain names the first
// crossing.
func (g *graph) adapterViolations() []string {
	var out []string
	for _, top := range g.tops() {
		if slices.Contains(notAdapters, top) {
			continue
		}
		for _, p := range g.packages(top) {
			chains := g.reach(p, func(q string) bool { a := g.adapter(q); return a == "" || a == top })
			for _, q := range sortedKeys(chains) {
				if a := g.adapter(q); a != "" && a != top {
					out = append(out, fmt.Sprintf("adapter %s depends on adapter %s: %s", top, a, g.describe(chains[q])))
				}
			}
		}
	}
	return out
}

// domainAdapterViolations: the domain reaches an adapter.
func (g *graph) domainAdapterViolations() []string {
	var out []string
	for _, p := range g.packages("hub") {
		chains := g.reach(p, func(q string) bool { return g.adapter(q) == "" })
		for _, q := range sortedKeys(chains) {
			if a := g.adapter(q); a != "" {
				out = append(out, fmt.Sprintf("the domain depends on adapter %s: %s", a, g.describe(chains[q])))
			}
		}
	}
	return out
}

// domainNetViolations: hub, or an internal/* utility it uses, imports net or
// net/http (or a package under net/http). Other module packages it reaches
// (the wire package lmos) and third-party ones are not judged: the wire
// package is shared with HTTP clients, and github.com/google/uuid imports
// net for node ids.
func (g *graph) domainNetViolations() []string {
	var out []string
	for _, p := range g.packages("hub") {
		chains := g.reach(p, func(q string) bool { return g.top(q) == "hub" || g.top(q) == "internal" })
		for _, q := range sortedKeys(chains) {
			if t := g.top(q); t != "hub" && t != "internal" {
				continue
			}
			for _, imp := range g.imports[q] {
				if imp == "net" || imp == "net/http" || strings.HasPrefix(imp, "net/http/") {
					chain := append(slices.Clone(chains[q]), imp)
					out = append(out, fmt.Sprintf("the domain imports %s: %s", imp, g.describe(chain)))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// agentViolations: the agent library reaches hub or an adapter, even
// through other packages. Every offender is reported with its shortest
// chain.
func (g *graph) agentViolations() []string {
	var out []string
	for _, p := range g.packages("agent") {
		chains := g.reach(p, func(string) bool { return true })
		for _, q := range sortedKeys(chains) {
			switch {
			case g.top(q) == "hub":
				out = append(out, fmt.Sprintf("the agent library depends on the domain: %s", g.describe(chains[q])))
			case g.adapter(q) != "":
				out = append(out, fmt.Sprintf("the agent library depends on adapter %s: %s", g.adapter(q), g.describe(chains[q])))
			}
		}
	}
	return out
}

// tops lists the module's top-level directories that hold packages.
func (g *graph) tops() []string {
	var out []string
	for p := range g.imports {
		if t := g.top(p); t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestImportRules checks the house rules on this module's real imports.
func TestImportRules(t *testing.T) {
	g := load(t)
	for _, rule := range []struct {
		name  string
		check func() []string
	}{
		{"adapters depend on no other adapter", g.adapterViolations},
		{"the domain depends on no adapter", g.domainAdapterViolations},
		{"the domain imports neither net nor net/http", g.domainNetViolations},
		{"the agent library depends on neither hub nor an adapter", g.agentViolations},
	} {
		t.Run(rule.name, func(t *testing.T) {
			for _, v := range rule.check() {
				t.Error(v)
			}
		})
	}
}
