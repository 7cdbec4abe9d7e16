package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/theory/jsonpath"
	"github.com/theory/jsonpath/spec"

	"github.com/eclipse-lmos/lmos-hub/internal/tdindex"
)

// SearchJSONPath evaluates an RFC 9535 query over the array of enriched TDs
// (in id order) and returns the selected nodes, within the node and time
// budgets of the search limits (for embedding and tests; the HTTP door
// streams with StreamJSONPath).
func (r *Registry) SearchJSONPath(query string) ([]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.search.lim.Timeout)
	defer cancel()
	return r.searchJSONPath(ctx, query)
}

// SearchJSONPathFor is SearchJSONPath for a client of a door: admitted
// through the per-client and global search gates, and stopped when ctx
// ends.
func (r *Registry) SearchJSONPathFor(ctx context.Context, client, query string) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.search.lim.Timeout)
	defer cancel()
	leave, err := r.search.enter(ctx, client)
	if err != nil {
		return nil, err
	}
	defer leave()
	return r.searchJSONPath(ctx, query)
}

func (r *Registry) searchJSONPath(ctx context.Context, query string) ([]any, error) {
	p, err := r.parseQuery(query)
	if err != nil {
		return nil, err
	}
	b := &budget{ctx: ctx, lim: r.search.lim, total: &r.search.nodes}
	out := []any{}
	err = r.selectJSONPath(b, p, func(n any) error {
		out = append(out, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(p.Query().Segments()) == 0 {
		return []any{out}, nil // "$" is the array itself
	}
	return out, nil
}

// StreamJSONPath evaluates query like SearchJSONPath and writes the JSON
// array of results to w as they are found, each node encoded as
// json.Marshal does. It admits the search through the per-client and
// global gates and stops at the first budget hit (nodes, result bytes,
// time) or when ctx ends (the client went away), returning an *Error that
// names the limit; w then holds an incomplete array.
func (r *Registry) StreamJSONPath(ctx context.Context, client, query string, w io.Writer) error {
	p, err := r.parseQuery(query)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.search.lim.Timeout)
	defer cancel()
	leave, err := r.search.enter(ctx, client)
	if err != nil {
		return err
	}
	defer leave()
	b := &budget{ctx: ctx, lim: r.search.lim, total: &r.search.nodes}
	write := func(s []byte) error {
		if err := b.wrote(len(s)); err != nil {
			return err
		}
		if _, err := w.Write(s); err != nil {
			return &Error{Code: EUNAVAILABLE, Message: "cannot write the answer", Err: err}
		}
		return nil
	}
	// "$" selects the array of TDs itself: one result, streamed element
	// by element.
	open, closing := "[", "]\n"
	if len(p.Query().Segments()) == 0 {
		open, closing = "[[", "]]\n"
	}
	if err := write([]byte(open)); err != nil {
		return err
	}
	first := true
	err = r.selectJSONPath(b, p, func(n any) error {
		enc, err := json.Marshal(n)
		if err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot encode a result", Err: err}
		}
		if !first {
			if err := write([]byte{','}); err != nil {
				return err
			}
		}
		first = false
		return write(enc)
	})
	if err != nil {
		return err
	}
	return write([]byte(closing))
}

// parseQuery parses a JSONPath query the hub is willing to run: not
// longer than search.maxQueryBytes, with at most search.maxDescendants
// descendant segments.
func (r *Registry) parseQuery(query string) (*jsonpath.Path, error) {
	if strings.TrimSpace(query) == "" {
		return nil, Errorf(EINVALID, "the query parameter is required")
	}
	lim := r.search.lim
	if len(query) > lim.MaxQueryBytes {
		return nil, &Error{Code: EINVALID, Limit: "search.maxQueryBytes",
			Message: "the query is longer than " + strconv.Itoa(lim.MaxQueryBytes) + " bytes"}
	}
	p, err := jsonpath.Parse(query)
	if err != nil {
		return nil, &Error{Code: EINVALID, Message: "invalid JSONPath query: " + err.Error()}
	}
	if n := countDescendants(p.String()); n > lim.MaxDescendants {
		return nil, &Error{Code: EINVALID, Limit: "search.maxDescendants",
			Message: "the query has " + strconv.Itoa(n) + " descendant segments (..); the hub runs at most " + strconv.Itoa(lim.MaxDescendants)}
	}
	return p, nil
}

// selectJSONPath passes every node p selects, in RFC 9535 order, to emit.
//
// The registry keeps no parsed documents, so a query parses the ones it
// may select. Queries whose first step filters the array run per TD; when
// the filter needs certain strings (an equality with a string literal, a
// member name) only TDs whose Summary may hold them are parsed. Building
// enriched views costs more than many queries, so when the query cannot
// observe what enrichment adds it runs over the stored documents and only
// whole-TD results are enriched. Segments are applied depth first, so a
// result is emitted as soon as it is found and the budget is checked
// between nodes.
func (r *Registry) selectJSONPath(b *budget, p *jsonpath.Path, emit func(any) error) error {
	now := r.opts.Now()
	things, _ := r.List(0, 0)
	plain := !observesEnrichment(p)
	perTD := splittable(p)
	if plain && perTD {
		// Enrichment adds no strings a plain query can see, so the
		// stored document's Summary decides.
		if f := tdindex.NewPrefilter(p); !f.IsZero() {
			things = slices.DeleteFunc(things, func(t *Thing) bool { return !f.MayMatch(&t.Summary.Summary) })
		}
	}
	things, parsed, err := r.documents(things)
	if err != nil {
		return err
	}
	if err := b.alive(); err != nil {
		return err
	}
	docs := make([]any, len(parsed))
	for i, d := range parsed {
		if plain {
			docs[i] = d
		} else {
			docs[i] = things[i].Enriched(d, now)
		}
	}
	segs := p.Query().Segments()
	if len(segs) == 0 {
		for _, d := range docs {
			if err := b.visit(1); err != nil {
				return err
			}
			if err := emit(d); err != nil {
				return err
			}
		}
		return nil
	}
	// With one segment every result is an element of the array: a TD that
	// must be served enriched.
	if plain && len(segs) == 1 {
		step := len(docs)
		if perTD {
			step = evalChunk // the budget is checked between chunks
		}
		for lo := 0; lo < len(docs); lo += step {
			located := p.SelectLocated(docs[lo:min(lo+step, len(docs))])
			for _, n := range located {
				if err := b.visit(1); err != nil {
					return err
				}
				node := n.Node
				if idx, ok := n.Path[0].(spec.Index); ok && len(n.Path) == 1 {
					node = things[lo+int(idx)].Enriched(parsed[lo+int(idx)], now)
				}
				if err := emit(node); err != nil {
					return err
				}
			}
		}
		return nil
	}
	e := &evaluator{segs: segs, root: docs, b: b, emit: emit}
	if perTD {
		// The first step takes elements one by one: run it on chunks, so
		// the budget is checked between them.
		for lo := 0; lo < len(docs); lo += evalChunk {
			if err := e.apply(segs[0], docs[lo:min(lo+evalChunk, len(docs))], 0); err != nil {
				return err
			}
		}
		return nil
	}
	return e.run(docs, 0)
}

// evalChunk is how many TDs a splittable first step takes at once.
const evalChunk = 64

// evaluator applies a query's segments depth first (the library applies
// them breadth first, holding every intermediate node list; concatenation
// makes the order the same), counting every node against the budget.
type evaluator struct {
	segs []*spec.Segment
	root any
	b    *budget
	emit func(any) error
}

func (e *evaluator) run(node any, k int) error {
	if k == len(e.segs) {
		return e.emit(node)
	}
	seg := e.segs[k]
	if seg.IsDescendant() {
		return e.descend(seg, node, k)
	}
	return e.apply(seg, node, k)
}

// apply runs segment k's selectors on node and the rest of the query on
// what they select.
func (e *evaluator) apply(seg *spec.Segment, node any, k int) error {
	for _, sel := range seg.Selectors() {
		got := sel.Select(node, e.root)
		if err := e.b.visit(1 + len(got)); err != nil {
			return err
		}
		for _, v := range got {
			if err := e.run(v, k+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// descend applies a descendant segment to node and to each of its
// descendants, in the library's order (node first, then its children).
func (e *evaluator) descend(seg *spec.Segment, node any, k int) error {
	if err := e.apply(seg, node, k); err != nil {
		return err
	}
	switch v := node.(type) {
	case []any:
		for _, c := range v {
			if err := e.descend(seg, c, k); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, c := range v {
			if err := e.descend(seg, c, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// documents parses the stored documents of things on all cores, each core
// reading its share in its own store transaction. Things deleted since
// they were listed are left out of both results.
func (r *Registry) documents(things []*Thing) ([]*Thing, []map[string]any, error) {
	docs := make([]map[string]any, len(things))
	parts := max(1, min(runtime.GOMAXPROCS(0), len(things)/64))
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for w := range parts {
		lo, hi := w*len(things)/parts, (w+1)*len(things)/parts
		wg.Go(func() {
			ids := make([]string, hi-lo)
			at := make(map[string]int, hi-lo)
			for i, t := range things[lo:hi] {
				ids[i], at[t.ID] = t.ID, lo+i
			}
			errs[w] = r.store.ThingsRaw(ids, func(id string, raw []byte) error {
				doc, err := r.Decoder().ParseDocument(raw)
				if err != nil {
					r.log.Error("skipping unreadable stored thing", "id", id, "err", err)
					return nil
				}
				docs[at[id]] = doc
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, &Error{Code: EINTERNAL, Message: "cannot read stored documents", Err: err}
	}
	kept := things[:0:0]
	keptDocs := docs[:0]
	for i, d := range docs {
		if d != nil {
			kept = append(kept, things[i])
			keptDocs = append(keptDocs, d)
		}
	}
	return kept, keptDocs, nil
}

// enrichedMembers are the members enrichment adds or changes.
var enrichedMembers = []string{"@context", "registration", "lmos:presence", "lmos:origin", "lmos:verified"}

// observesEnrichment reports whether a query might see a difference between
// a stored and an enriched TD: by naming an enriched member, by wildcard or
// descendant steps (which reach every member), or by functions that look at
// a whole object. It errs towards yes.
func observesEnrichment(p *jsonpath.Path) bool {
	q := p.String()
	if len(p.Query().Segments()) == 0 {
		return true // "$" selects the whole array of TDs
	}
	if strings.ContainsAny(q, "*") || strings.Contains(q, "..") ||
		strings.Contains(q, "length(") || strings.Contains(q, "count(") || strings.Contains(q, "value(") {
		return true
	}
	for _, m := range enrichedMembers {
		if strings.Contains(q, m) {
			return true
		}
	}
	return false
}

// splittable reports whether evaluating p over parts of the array and
// concatenating the results equals evaluating it over the whole array: the
// first step must select array elements one by one, independently of the
// others (a single wildcard or filter selector, no descendant step), and no
// filter may refer back to the root.
func splittable(p *jsonpath.Path) bool {
	segs := p.Query().Segments()
	if len(segs) == 0 || segs[0].IsDescendant() || len(segs[0].Selectors()) != 1 {
		return false
	}
	if strings.Contains(p.String()[1:], "$") {
		return false
	}
	switch segs[0].Selectors()[0].(type) {
	case spec.WildcardSelector, *spec.FilterSelector:
		return true
	}
	return false
}

// TextHit is one result of SearchText.
type TextHit struct {
	ID    string  `json:"id"`
	Title string  `json:"title"`
	Score float64 `json:"score"`
	// Matches are JSON pointers to the members that matched.
	Matches []string `json:"matches"`
}

// SearchText ranks Things by how well their title, description, affordance
// names and descriptions, and lmos:capabilities match the words of q.
// typ, when set, keeps only Things of that @type ("Agent" matches
// "lmos:Agent"). Every word of q must match somewhere in a Thing.
func (r *Registry) SearchText(q, typ string, limit int) ([]TextHit, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.search.lim.Timeout)
	defer cancel()
	return r.searchText(ctx, q, typ, limit)
}

// SearchTextFor is SearchText for a client of a door: admitted through the
// search gates, within search.maxQueryBytes and search.timeout, and
// stopped when ctx ends.
func (r *Registry) SearchTextFor(ctx context.Context, client, q, typ string, limit int) ([]TextHit, error) {
	ctx, cancel := context.WithTimeout(ctx, r.search.lim.Timeout)
	defer cancel()
	leave, err := r.search.enter(ctx, client)
	if err != nil {
		return nil, err
	}
	defer leave()
	return r.searchText(ctx, q, typ, limit)
}

func (r *Registry) searchText(ctx context.Context, q, typ string, limit int) ([]TextHit, error) {
	if len(q) > r.search.lim.MaxQueryBytes {
		return nil, &Error{Code: EINVALID, Limit: "search.maxQueryBytes",
			Message: "the q parameter is longer than " + strconv.Itoa(r.search.lim.MaxQueryBytes) + " bytes"}
	}
	terms := tdindex.Terms(q)
	if len(terms) == 0 {
		return nil, Errorf(EINVALID, "the q parameter must contain at least one word")
	}
	if limit <= 0 {
		limit = 20
	}
	// Each Thing costs its fields times the terms: count that as nodes.
	b := &budget{ctx: ctx, lim: r.search.lim, total: &r.search.nodes}
	things, _ := r.List(0, 0)
	var hits []TextHit
	m := r.searchIndex.Matcher(terms)
	for _, t := range things {
		if err := b.visit(len(terms)); err != nil {
			return nil, err
		}
		if typ != "" && !hasType(t.Summary, typ) {
			continue
		}
		if score, matches, ok := m.Match(&t.Summary.Summary); ok {
			hits = append(hits, TextHit{ID: t.ID, Title: t.Summary.Title, Score: score, Matches: matches})
		}
	}
	slices.SortFunc(hits, func(a, b TextHit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	if hits == nil {
		hits = []TextHit{}
	}
	return hits, nil
}

// hasType reports whether the Thing has the @type want, compared without
// case and without an "lmos:" prefix ("Agent" matches "lmos:Agent").
func hasType(s *Summary, want string) bool {
	norm := func(s string) string { return strings.ToLower(strings.TrimPrefix(s, "lmos:")) }
	w := norm(want)
	return s.AnyType(func(t string) bool { return norm(t) == w })
}
