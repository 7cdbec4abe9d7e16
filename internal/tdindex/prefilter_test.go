package tdindex

import (
	"reflect"
	"testing"

	"github.com/theory/jsonpath"
)

func TestRequiredStrings(t *testing.T) {
	cases := []struct {
		query string
		want  need
	}{
		{`$[?@.title=='Lamp'].id`, need{{"Lamp"}}},
		{`$[?'Lamp'==@.title]`, need{{"Lamp"}}},
		{`$[?@.title=='a' && @.x=='b']`, need{{"a"}, {"b"}}},
		{`$[?@.title=='a' || @.title=='b']`, need{{"a", "b"}}},
		{`$[?@['lmos:capabilities'][?@.name=='set temperature']].id`, need{{"lmos:capabilities"}, {"set temperature"}}},
		{`$[?@.actions.toggle]`, need{{"actions"}, {"toggle"}}},
		{`$[?@.title=='say "hi" == x']`, need{{`say "hi" == x`}}},
		// Nothing can be required of these.
		{`$[?@.title=='a' || @.x]`, need{{"a", "x"}}},
		{`$[?@.title=='a' || @.n > 1]`, nil},
		{`$[?!(@.title=='a')]`, nil},
		{`$[?@.title!='a']`, nil},
		{`$[?@.n==1]`, nil},
		{`$[?'a'=='a']`, nil},
		{`$[?match(@.title, 'a')]`, nil},
		{`$[*].title`, nil},
		{`$[?@.a[0,1]]`, need{{"a"}}},
	}
	for _, c := range cases {
		got := requiredStrings(jsonpath.MustParse(c.query))
		if len(got) == 0 && len(c.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: need %q, want %q", c.query, got, c.want)
		}
	}
}

// TestPrefilterSkips: a Prefilter passes the TDs that hold what the query
// needs and rejects one that certainly does not; the zero one passes all.
func TestPrefilterSkips(t *testing.T) {
	ix := New()
	lamp := summarize(ix, parse(t, []byte(`{"title":"Lamp","actions":{"toggle":{}}}`)))
	fan := summarize(ix, parse(t, []byte(`{"title":"Fan","properties":{"speed":{}}}`)))
	for _, c := range []struct {
		query     string
		lamp, fan bool
	}{
		{`$[?@.title=='Lamp'].id`, true, false},
		{`$[?@.actions.toggle]`, true, false},
		{`$[?@.title=='Lamp' || @.title=='Fan']`, true, true},
		{`$[?@.title!='Lamp']`, true, true},
	} {
		f := NewPrefilter(jsonpath.MustParse(c.query))
		if f.MayMatch(lamp) != c.lamp || f.MayMatch(fan) != c.fan {
			t.Errorf("%s: lamp %v fan %v, want %v %v", c.query, f.MayMatch(lamp), f.MayMatch(fan), c.lamp, c.fan)
		}
	}
	if !NewPrefilter(jsonpath.MustParse(`$[?@.n > 1]`)).IsZero() || NewPrefilter(jsonpath.MustParse(`$[?@.title=='Lamp']`)).IsZero() {
		t.Errorf("IsZero does not say whether the query requires anything")
	}
}
