package tdindex

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// match is one Matcher result.
type match struct {
	score   float64
	matches []string
	ok      bool
}

func matchOf(m *Matcher, s *Summary) match {
	score, matches, ok := m.Match(s)
	return match{score, matches, ok}
}

// referenceMatch is the text search's scoring read from a stored summary's
// plain fields: what the Matcher does on coded fields must equal it.
func referenceMatch(stored *Summary, terms []string) match {
	score := 0.0
	var matches []string
	found := make([]bool, len(terms))
	for _, f := range rawFieldsOf(stored) {
		hit := false
		for i, term := range terms {
			at := strings.Index(f.text, term)
			if at < 0 {
				continue
			}
			found[i], hit = true, true
			w := fieldWeights[f.kind]
			if wholeWordAt(f.text, term, at) {
				w *= 1.5
			}
			score += w
		}
		if hit {
			matches = append(matches, stored.fieldPointer(f.kind, f.a, f.c))
		}
	}
	for _, f := range found {
		if !f {
			return match{}
		}
	}
	slices.Sort(matches)
	matches = slices.Compact(matches)
	return match{math.Round(score*100) / 100, matches, true}
}

func TestTerms(t *testing.T) {
	for q, want := range map[string][]string{
		"Set the Temperature, set!": {"set", "the", "temperature"},
		"  -- ":                     nil,
		"Größe 21°C":                {"größe", "21", "c"},
	} {
		if got := Terms(q); !reflect.DeepEqual(got, want) {
			t.Errorf("Terms(%q) = %q, want %q", q, got, want)
		}
	}
}

// TestMatcherRanks: the fields, their weights and whole words decide the
// score, every term must match, and the pointers name the fields.
func TestMatcherRanks(t *testing.T) {
	ix := New()
	doc := parse(t, []byte(`{"title":"Thermostat","description":"keeps the room warm",
		"actions":{"setTargetTemperature":{"title":"Set temperature"}},
		"lmos:capabilities":[{"name":"temperature control","examples":["make it warmer"]}]}`))
	s := summarize(ix, doc)
	got := matchOf(ix.Matcher(Terms("temperature")), s)
	// affordance name 3·1.5, affordance title 1·1.5, capability name 4·1.5
	want := match{12, []string{"/actions/setTargetTemperature", "/actions/setTargetTemperature/title", "/lmos:capabilities/0/name"}, true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("temperature: %+v, want %+v", got, want)
	}
	// Fragments count their field's weight (title 4, example 2), a whole
	// word half as much again (description 2·1.5).
	want = match{9, []string{"/description", "/lmos:capabilities/0/examples/0", "/title"}, true}
	if got := matchOf(ix.Matcher(Terms("therm warm")), s); !reflect.DeepEqual(got, want) {
		t.Errorf("therm warm: %+v, want %+v", got, want)
	}
	if got := matchOf(ix.Matcher(Terms("temperature lamp")), s); got.ok {
		t.Errorf("a term nowhere in the TD matched: %+v", got)
	}
}
