package tdindex

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// Searchable field kinds. A field is stored as its kind, the numbers that
// locate it (affordance kind and index into names, capability index,
// example index), and its lower-cased text; the JSON pointer is rebuilt
// only for fields that match.
const (
	fieldTitle = iota
	fieldDescription
	fieldAffordanceName
	fieldAffordanceTitle
	fieldAffordanceDescription
	fieldCapabilityName
	fieldCapabilityID
	fieldCapabilityDescription
	fieldCapabilityExample
)

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

var fieldWeights = [...]float64{
	fieldTitle:                 weightTitle,
	fieldDescription:           weightDescription,
	fieldAffordanceName:        weightAffordanceName,
	fieldAffordanceTitle:       weightAffordanceText,
	fieldAffordanceDescription: weightAffordanceText,
	fieldCapabilityName:        weightCapability,
	fieldCapabilityID:          weightCapabilityText,
	fieldCapabilityDescription: weightCapabilityText,
	fieldCapabilityExample:     weightCapabilityText,
}

// searchFields encodes the searchable fields of doc: its title and
// description, each affordance's name (camel case split into words),
// title and description, and each lmos:capabilities entry's name, id,
// description and examples.
func searchFields(doc map[string]any, title string, names *[3][]string) string {
	var b []byte
	add := func(kind byte, a, c int, text string) {
		if text == "" {
			return
		}
		text = strings.ToLower(text)
		b = append(b, kind)
		b = binary.AppendUvarint(b, uint64(a))
		b = binary.AppendUvarint(b, uint64(c))
		b = binary.AppendUvarint(b, uint64(len(text)))
		b = append(b, text...)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	add(fieldTitle, 0, 0, title)
	add(fieldDescription, 0, 0, str(doc["description"]))
	for k, member := range affordanceMembers {
		affs, _ := doc[member].(map[string]any)
		for i, name := range names[k] {
			add(fieldAffordanceName, k, i, splitCamel(name))
			if m, ok := affs[name].(map[string]any); ok {
				add(fieldAffordanceTitle, k, i, str(m["title"]))
				add(fieldAffordanceDescription, k, i, str(m["description"]))
			}
		}
	}
	caps, _ := doc["lmos:capabilities"].([]any)
	for i, c := range caps {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		add(fieldCapabilityName, i, 0, str(m["name"]))
		add(fieldCapabilityID, i, 0, str(m["id"]))
		add(fieldCapabilityDescription, i, 0, str(m["description"]))
		ex, _ := m["examples"].([]any)
		for j, e := range ex {
			add(fieldCapabilityExample, i, j, str(e))
		}
	}
	return string(b)
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

// eachField calls fn with every searchable field of s: its kind, location
// and lower-cased text, expanded into *buf (text is valid only during the
// call; *buf is reused from call to call).
func (ix *Index) eachField(s *Summary, buf *[]byte, fn func(kind byte, a, c int, text []byte)) {
	eachFieldIn(s.enc[s.searchAt:s.searchEnd], func(kind byte, a, c int, coded string) {
		*buf = ix.dict.expand((*buf)[:0], coded)
		fn(kind, a, c, *buf)
	})
}

// fieldPointer is the JSON pointer of a searchable field.
func (s *Summary) fieldPointer(kind byte, a, c int) string {
	switch kind {
	case fieldTitle:
		return "/title"
	case fieldDescription:
		return "/description"
	case fieldAffordanceName, fieldAffordanceTitle, fieldAffordanceDescription:
		p := "/" + affordanceMembers[a] + "/" + jsonx.EscapePointer(s.nameAt(a, c))
		switch kind {
		case fieldAffordanceTitle:
			p += "/title"
		case fieldAffordanceDescription:
			p += "/description"
		}
		return p
	}
	p := "/lmos:capabilities/" + strconv.Itoa(a)
	switch kind {
	case fieldCapabilityName:
		return p + "/name"
	case fieldCapabilityID:
		return p + "/id"
	case fieldCapabilityDescription:
		return p + "/description"
	}
	return p + "/examples/" + strconv.Itoa(c)
}

// Terms splits a text query into its distinct lower-cased words (runs of
// letters and digits), in order of first appearance.
func Terms(q string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// Matcher scores the summaries of one text search against its terms; it
// keeps its buffers from summary to summary, so it is for one goroutine.
//
// It reads each field as the Summary keeps it, words coded (dictionary.go),
// without expanding it. A term holds only letters and digits, so each of
// its occurrences lies within one run of word bytes; a coded word is a
// whole run. So a term occurs in a field if it occurs in one of the plain
// segments between codes or in a coded word, and an occurrence is a whole
// word if it is one within its segment (a segment's edge next to a code
// is a non-word byte) or if it is the coded word itself. What a code's
// word holds of each term is worked out once per search.
type Matcher struct {
	dict  *wordDict
	terms []string
	found []bool
	// st is, per term, what the field being read holds of it.
	st []uint8
	// memo is, per dictionary code and term, what the code's word holds
	// of the term (0: not worked out yet).
	memo []uint8
	buf  []byte // a field expanded, for fields with escaped bytes
}

// What a text holds of a term.
const (
	termAbsent = iota + 1
	termIn
	termWhole
)

// Matcher returns a Matcher for terms (from Terms) over the summaries of
// ix.
func (ix *Index) Matcher(terms []string) *Matcher {
	return &Matcher{dict: &ix.dict, terms: terms, found: make([]bool, len(terms)), st: make([]uint8, len(terms))}
}

// Match reports whether every term occurs in some search field of s and,
// if so, its score and the sorted JSON pointers of the fields that hold a
// term. Each field adds its weight for each term it holds, half as much
// again when the term is a whole word there; the score is rounded to two
// decimals.
func (m *Matcher) Match(s *Summary) (score float64, matches []string, ok bool) {
	found := m.found
	clear(found)
	eachFieldIn(s.enc[s.searchAt:s.searchEnd], func(kind byte, a, c int, coded string) {
		st := m.st
		clear(st)
		if strings.Contains(coded, escapeBytes) {
			// A byte of the text itself ≥ 0xF8 (rare): read it expanded.
			m.buf = m.dict.expand(m.buf[:0], coded)
			m.plain(string(m.buf))
		} else {
			m.coded(coded)
		}
		hit := false
		for i, v := range st {
			if v < termIn {
				continue
			}
			found[i], hit = true, true
			w := fieldWeights[kind]
			if v == termWhole {
				w *= 1.5 // a whole word beats a fragment
			}
			score += w
		}
		if hit {
			matches = append(matches, s.fieldPointer(kind, a, c))
		}
	})
	for _, f := range found {
		if !f {
			return 0, nil, false
		}
	}
	slices.Sort(matches)
	matches = slices.Compact(matches)
	return math.Round(score*100) / 100, matches, true
}

// plain records in m.st what the plain text holds of each term.
func (m *Matcher) plain(text string) {
	for i, term := range m.terms {
		at := strings.Index(text, term)
		if at < 0 {
			continue
		}
		v := uint8(termIn)
		if wholeWordAt(text, term, at) {
			v = termWhole
		}
		m.st[i] = max(m.st[i], v)
	}
}

// coded records in m.st what the coded text (no escapes) holds of each
// term.
func (m *Matcher) coded(f string) {
	for len(f) > 0 {
		i := 0
		for i < len(f) && f[i] < wordCodeByte {
			i++
		}
		if i > 0 {
			m.plain(f[:i])
		}
		if i+1 >= len(f) {
			return
		}
		c := int(f[i]&3)<<8 | int(f[i+1])
		f = f[i+2:]
		if m.memo == nil {
			m.memo = make([]uint8, maxWordCodes*len(m.terms))
		}
		if c >= maxWordCodes {
			continue
		}
		memo := m.memo[c*len(m.terms) : (c+1)*len(m.terms)]
		for j, term := range m.terms {
			if memo[j] == 0 {
				w := m.dict.word(uint16(c))
				switch {
				case w == term:
					memo[j] = termWhole
				case strings.Contains(w, term):
					memo[j] = termIn
				default:
					memo[j] = termAbsent
				}
			}
			m.st[j] = max(m.st[j], memo[j])
		}
	}
}

// wholeWordAt reports whether some occurrence of term in s (both lower
// case), the first at byte at, stands as a whole word.
func wholeWordAt(s, term string, at int) bool {
	for at >= 0 {
		before := at == 0 || !isWordByte(s[at-1])
		end := at + len(term)
		after := end >= len(s) || !isWordByte(s[end])
		if before && after {
			return true
		}
		next := strings.Index(s[at+1:], term)
		if next < 0 {
			return false
		}
		at += 1 + next
	}
	return false
}

func isWordByte(c byte) bool {
	return c >= utf8.RuneSelf || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c))
}
