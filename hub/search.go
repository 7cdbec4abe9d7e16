package hub

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/theory/jsonpath"
	"github.com/theory/jsonpath/spec"
)

// SearchJSONPath evaluates an RFC 9535 query over the array of enriched TDs
// (in id order) and returns the selected nodes.
//
// Building 10k enriched views per query costs more than the query itself,
// so when the query cannot observe what enrichment adds it runs over the
// stored documents and only whole-TD results are enriched. Queries whose
// first step filters the array run on all cores, one slice each.
func (r *Registry) SearchJSONPath(query string) ([]any, error) {
	if strings.TrimSpace(query) == "" {
		return nil, Errorf(EINVALID, "the query parameter is required")
	}
	p, err := jsonpath.Parse(query)
	if err != nil {
		return nil, &Error{Code: EINVALID, Message: "invalid JSONPath query: " + err.Error()}
	}
	now := r.opts.Now()
	things, _ := r.List(0, 0)
	plain := !observesEnrichment(p)
	docs := make([]any, len(things))
	for i, t := range things {
		if plain {
			docs[i] = t.Doc
		} else {
			docs[i] = t.Enriched(now)
		}
	}
	// With one segment every result is an element of the array: a TD that
	// must be served enriched.
	wholeTDs := plain && len(p.Query().Segments()) == 1
	eval := func(lo, hi int) []any {
		if !wholeTDs {
			return p.Select(docs[lo:hi])
		}
		located := p.SelectLocated(docs[lo:hi])
		out := make([]any, 0, len(located))
		for _, n := range located {
			idx, ok := n.Path[0].(spec.Index)
			if !ok || len(n.Path) != 1 {
				out = append(out, n.Node) // cannot happen for a one-segment query over an array
				continue
			}
			out = append(out, things[lo+int(idx)].Enriched(now))
		}
		return out
	}
	parts := 1
	if len(docs) >= 2048 && splittable(p) {
		parts = runtime.GOMAXPROCS(0)
	}
	results := make([][]any, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*len(docs)/parts, (i+1)*len(docs)/parts
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = eval(lo, hi) }()
	}
	wg.Wait()
	out := make([]any, 0, len(results[0]))
	for _, part := range results {
		out = append(out, part...)
	}
	return out, nil
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

// Field weights for capability search: what a Thing says it is and can do
// counts more than prose about it.
const (
	weightTitle          = 4
	weightCapability     = 4
	weightAffordanceName = 3
	weightDescription    = 2
	weightCapabilityText = 2
	weightAffordanceText = 1
)

// SearchText ranks Things by how well their title, description, affordance
// names and descriptions, and lmos:capabilities match the words of q.
// typ, when set, keeps only Things of that @type ("Agent" matches
// "lmos:Agent"). Every word of q must match somewhere in a Thing.
func (r *Registry) SearchText(q, typ string, limit int) ([]TextHit, error) {
	terms := tokenize(q)
	if len(terms) == 0 {
		return nil, Errorf(EINVALID, "the q parameter must contain at least one word")
	}
	if limit <= 0 {
		limit = 20
	}
	things, _ := r.List(0, 0)
	var hits []TextHit
	for i := range things {
		t := things[i]
		if typ != "" && !hasType(t.Doc, typ) {
			continue
		}
		if h, ok := scoreThing(t, terms); ok {
			hits = append(hits, h)
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

// visitFields calls fn for every searchable member: its pointer (built only
// if fn asks for it), its text and its weight.
func visitFields(doc map[string]any, fn func(ptr func() string, text string, weight float64)) {
	str := func(v any) string { s, _ := v.(string); return s }
	fixed := func(p string) func() string { return func() string { return p } }
	fn(fixed("/title"), str(doc["title"]), weightTitle)
	fn(fixed("/description"), str(doc["description"]), weightDescription)
	for _, kind := range []string{"properties", "actions", "events"} {
		affs, _ := doc[kind].(map[string]any)
		for name, a := range affs {
			base := func() string { return "/" + kind + "/" + escapePointer(name) }
			fn(base, splitCamel(name), weightAffordanceName)
			if m, ok := a.(map[string]any); ok {
				fn(func() string { return base() + "/title" }, str(m["title"]), weightAffordanceText)
				fn(func() string { return base() + "/description" }, str(m["description"]), weightAffordanceText)
			}
		}
	}
	caps, _ := doc["lmos:capabilities"].([]any)
	for i, c := range caps {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		base := func() string { return "/lmos:capabilities/" + itoa(i) }
		fn(func() string { return base() + "/name" }, str(m["name"]), weightCapability)
		fn(func() string { return base() + "/id" }, str(m["id"]), weightCapabilityText)
		fn(func() string { return base() + "/description" }, str(m["description"]), weightCapabilityText)
		ex, _ := m["examples"].([]any)
		for j, e := range ex {
			fn(func() string { return base() + "/examples/" + itoa(j) }, str(e), weightCapabilityText)
		}
	}
}

func scoreThing(t *Thing, terms []string) (TextHit, bool) {
	score := 0.0
	var matches []string
	found := make([]bool, len(terms))
	visitFields(t.Doc, func(ptr func() string, text string, weight float64) {
		if text == "" {
			return
		}
		if !isASCII(text) {
			text = strings.ToLower(text)
		}
		hit := false
		for i, term := range terms {
			at := indexFold(text, term)
			if at < 0 {
				continue
			}
			found[i], hit = true, true
			w := weight
			if wholeWordAt(text, term, at) {
				w *= 1.5 // a whole word beats a fragment
			}
			score += w
		}
		if hit {
			matches = append(matches, ptr())
		}
	})
	for _, f := range found {
		if !f {
			return TextHit{}, false
		}
	}
	slices.Sort(matches)
	matches = slices.Compact(matches)
	title, _ := t.Doc["title"].(string)
	return TextHit{ID: t.ID, Title: title, Score: math.Round(score*100) / 100, Matches: matches}, true
}

// indexFold finds term (lower case) in s ignoring ASCII case, without
// allocating. Callers lower non-ASCII text first (see scoreThing); bytes of
// multi-byte characters then compare exactly, which is correct for UTF-8.
func indexFold(s, term string) int {
	if len(term) == 0 {
		return -1
	}
	for i := 0; i+len(term) <= len(s); i++ {
		if lowerASCII(s[i]) == term[0] && hasPrefixFold(s[i:], term) {
			return i
		}
	}
	return -1
}

func hasPrefixFold(s, lowerPrefix string) bool {
	for j := 0; j < len(lowerPrefix); j++ {
		if lowerASCII(s[j]) != lowerPrefix[j] {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// wholeWordAt reports whether some occurrence of term in s, the first at
// byte at, stands as a whole word.
func wholeWordAt(s, term string, at int) bool {
	for at >= 0 {
		before := at == 0 || !isWordByte(s[at-1])
		end := at + len(term)
		after := end >= len(s) || !isWordByte(s[end])
		if before && after {
			return true
		}
		next := indexFold(s[at+1:], term)
		if next < 0 {
			return false
		}
		at += 1 + next
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isWordByte(c byte) bool {
	return c >= utf8.RuneSelf || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c))
}

func tokenize(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// splitCamel turns "setTargetTemperature" into "set target temperature" so
// affordance names match plain words.
func splitCamel(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func hasType(doc map[string]any, want string) bool {
	norm := func(s string) string { return strings.ToLower(strings.TrimPrefix(s, "lmos:")) }
	w := norm(want)
	switch v := doc["@type"].(type) {
	case string:
		return norm(v) == w
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && norm(s) == w {
				return true
			}
		}
	}
	return false
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func itoa(i int) string { return jsonInt(int64(i)) }
