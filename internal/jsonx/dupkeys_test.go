package jsonx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// hasDupesReference finds duplicate member names with encoding/json's
// tokenizer: slow, but obviously right.
func hasDupesReference(raw []byte) bool {
	d := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		obj   bool
		key   bool // the next string token in an object is a key
		names map[string]bool
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return false
		}
		top := func() *frame {
			if len(stack) == 0 {
				return nil
			}
			return stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if f := top(); f != nil && f.obj {
					f.key = true
				}
				stack = append(stack, &frame{obj: true, key: true, names: map[string]bool{}})
			case '[':
				if f := top(); f != nil && f.obj {
					f.key = true
				}
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
			}
		default:
			f := top()
			if f != nil && f.obj {
				if f.key {
					s := v.(string)
					if f.names[s] {
						return true
					}
					f.names[s] = true
					f.key = false
				} else {
					f.key = true
				}
			}
		}
	}
}

func TestDuplicateMember(t *testing.T) {
	for raw, want := range map[string]string{
		`{"a":1,"b":{"c":[{"d":1,"d":2}]}}`:   "/b/c/0/d",
		`{"id":"x","title":"t","id":"y"}`:     "/id",
		`{"a/b":1,"a\/b":2}`:                  "/a~1b",
		`{"\u0040context":1,"@context":2}`:    "/@context",
		`{"a":{"x":1},"b":{"x":1}}`:           "",
		`{"a":[{"x":1},{"x":1}],"s":"\"a\""}`: "",
	} {
		got, dup := DuplicateMember([]byte(raw))
		if got != want || dup != (want != "") {
			t.Errorf("%s: %q %v, want %q", raw, got, dup, want)
		}
	}
}

// manyMembers returns an object with n members m0…m{n-1}, then dup again
// when dup is not empty.
func manyMembers(n int, dup string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"m%d":{}`, i)
	}
	if dup != "" {
		fmt.Fprintf(&b, `,"%s":1`, dup)
	}
	b.WriteString(`}}`)
	return b.Bytes()
}

func TestDuplicateMemberLarge(t *testing.T) {
	for _, n := range []int{smallObject - 1, smallObject, smallObject + 1, 1000} {
		for _, dup := range []string{"", "m0", fmt.Sprintf("m%d", n/2), fmt.Sprintf("m%d", n-1)} {
			got, found := DuplicateMember(manyMembers(n, dup))
			if want := "/properties/" + dup; found != (dup != "") || (found && got != want) {
				t.Errorf("n=%d dup=%q: %q %v, want %q", n, dup, got, found, want)
			}
		}
	}
}

// TestDuplicateMemberLinear is the quadratic check of issue 12: a TD whose
// one object has ~100k members cost 10 s of CPU, each name compared with
// every earlier one. Each name must cost a bounded amount of work: at most
// smallObject comparisons with earlier names, then one set look-up. (Work
// is checked by structure, not timed; BenchmarkDuplicateMember94k
// measures it.)
func TestDuplicateMemberLinear(t *testing.T) {
	var seen [][]byte
	var set map[string]struct{}
	const n = 5000
	for i := range n {
		if seenBefore(&seen, &set, fmt.Appendf(nil, "m%d", i)) {
			t.Fatalf("m%d seen before", i)
		}
		if len(seen) > smallObject {
			t.Fatalf("after %d names %d are compared one by one, want at most %d", i+1, len(seen), smallObject)
		}
		if i >= smallObject && (seen != nil || len(set) != i+1) {
			t.Fatalf("after %d names: %d in the slice, %d in the set; want all in the set", i+1, len(seen), len(set))
		}
	}
	if !seenBefore(&seen, &set, []byte("m4999")) || !seenBefore(&seen, &set, []byte("m0")) {
		t.Fatal("a repeated name was not found in the set")
	}
}

func BenchmarkDuplicateMember94k(b *testing.B) {
	raw := manyMembers(94000, "")
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		DuplicateMember(raw)
	}
}

func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `[{"a":[],"b":{"a":{},"a":[]}}]`, `{"a":"}\"{","b":[1,{"c":null}]}`,
		`{"\u0061":1,"a":2}`, ` { "x" : [ ] , "y" : { } } `,
		// Past smallObject members: the set takes over (a duplicate on
		// either side of the switch).
		string(manyMembers(40, "")), string(manyMembers(40, "m3")), string(manyMembers(40, "m39"))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		_, got := DuplicateMember(raw)
		if want := hasDupesReference(raw); got != want {
			t.Fatalf("%s: duplicate %v, reference %v", raw, got, want)
		}
	})
}
