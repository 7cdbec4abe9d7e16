package jsonx

import (
	"strings"
	"testing"
)

func TestTooDeep(t *testing.T) {
	for _, c := range []struct {
		raw   string
		limit int
		ptr   string
		deep  bool
	}{
		{`[[1]]`, 2, "", false},
		{`[[1]]`, 1, "/0", true},
		{`{"a/~b":{"c":[0,[1]]}}`, 3, "/a~1~0b/c/1", true},
		{`{"s":"[[[[{{{{","t":"\"[["}`, 1, "", false}, // brackets in strings do not count
		{strings.Repeat("[", 10000), 32, strings.Repeat("/0", 32), true},
		{`{"a":`, 32, "", false}, // not valid JSON: the decoder says so, not this scan
	} {
		ptr, deep := TooDeep([]byte(c.raw), c.limit)
		if ptr != c.ptr || deep != c.deep {
			t.Errorf("TooDeep(%.30s, %d) = %q %v, want %q %v", c.raw, c.limit, ptr, deep, c.ptr, c.deep)
		}
	}
}

func TestMembers(t *testing.T) {
	ms, err := Members([]byte(` { "a" : [1, {"x":"}"}] , "b\u0063":"s","d":true } `))
	if err != nil || len(ms) != 3 {
		t.Fatalf("%v %v", ms, err)
	}
	raw := []byte(` { "a" : [1, {"x":"}"}] , "b\u0063":"s","d":true } `)
	ms, _ = Members(raw)
	for i, want := range []struct{ key, value string }{{"a", `[1, {"x":"}"}]`}, {"bc", `"s"`}, {"d", "true"}} {
		if string(ms[i].Key) != want.key || string(raw[ms[i].ValueStart:ms[i].End]) != want.value {
			t.Errorf("member %d: %q = %q, want %q = %q", i, ms[i].Key, raw[ms[i].ValueStart:ms[i].End], want.key, want.value)
		}
	}
	if got := string(AppendCompact(nil, raw[ms[0].Start:ms[0].End])); got != `"a":[1,{"x":"}"}]` {
		t.Errorf("compact: %s", got)
	}
	for _, bad := range []string{`[]`, `{"a":1`, `{"a" 1}`, `{"a":1,}`, `{a:1}`, `{"a":"x}`} {
		if _, err := Members([]byte(bad)); err != ErrNotObject {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
