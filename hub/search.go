package hub

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/theory/jsonpath"
)

// SearchJSONPath evaluates an RFC 9535 query over the array of enriched TDs
// (in id order) and returns the selected nodes.
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
	docs := make([]any, len(things))
	for i := range things {
		docs[i] = things[i].Enriched(now)
	}
	nodes := p.Select(docs)
	if nodes == nil {
		return []any{}, nil
	}
	return nodes, nil
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
		t := &things[i]
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

type searchField struct {
	pointer string
	text    string
	weight  float64
}

func searchFields(doc map[string]any) []searchField {
	var fs []searchField
	add := func(ptr string, v any, w float64) {
		if s, ok := v.(string); ok && s != "" {
			fs = append(fs, searchField{ptr, strings.ToLower(s), w})
		}
	}
	add("/title", doc["title"], weightTitle)
	add("/description", doc["description"], weightDescription)
	for _, kind := range []string{"properties", "actions", "events"} {
		affs, _ := doc[kind].(map[string]any)
		for name, a := range affs {
			ptr := "/" + kind + "/" + escapePointer(name)
			fs = append(fs, searchField{ptr, strings.ToLower(splitCamel(name)), weightAffordanceName})
			if m, ok := a.(map[string]any); ok {
				add(ptr+"/title", m["title"], weightAffordanceText)
				add(ptr+"/description", m["description"], weightAffordanceText)
			}
		}
	}
	caps, _ := doc["lmos:capabilities"].([]any)
	for i, c := range caps {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		ptr := "/lmos:capabilities/" + itoa(i)
		add(ptr+"/name", m["name"], weightCapability)
		add(ptr+"/id", m["id"], weightCapabilityText)
		add(ptr+"/description", m["description"], weightCapabilityText)
		ex, _ := m["examples"].([]any)
		for j, e := range ex {
			add(ptr+"/examples/"+itoa(j), e, weightCapabilityText)
		}
	}
	return fs
}

func scoreThing(t *Thing, terms []string) (TextHit, bool) {
	fields := searchFields(t.Doc)
	score := 0.0
	var matches []string
	for _, term := range terms {
		found := false
		for _, f := range fields {
			if !strings.Contains(f.text, term) {
				continue
			}
			found = true
			w := f.weight
			if containsWord(f.text, term) {
				w *= 1.5 // a whole word beats a fragment
			}
			score += w
			if !slices.Contains(matches, f.pointer) {
				matches = append(matches, f.pointer)
			}
		}
		if !found {
			return TextHit{}, false
		}
	}
	slices.Sort(matches)
	title, _ := t.Doc["title"].(string)
	return TextHit{ID: t.ID, Title: title, Score: math.Round(score*100) / 100, Matches: matches}, true
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

func containsWord(text, word string) bool {
	return slices.Contains(tokenize(text), word)
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
