package hub

import (
	"bytes"
	"encoding/json"
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
		got, dup := duplicateMember([]byte(raw))
		if got != want || dup != (want != "") {
			t.Errorf("%s: %q %v, want %q", raw, got, dup, want)
		}
	}
	_, err := ParseDocument([]byte(`{"id":"urn:a","title":"t","id":"urn:b"}`))
	if ErrorCode(err) != EINVALID || len(ErrorFields(err)) != 1 || ErrorFields(err)[0].Field != "/id" {
		t.Errorf("ParseDocument with a duplicate id: %v %v", err, ErrorFields(err))
	}
}

func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `[{"a":[],"b":{"a":{},"a":[]}}]`, `{"a":"}\"{","b":[1,{"c":null}]}`,
		`{"\u0061":1,"a":2}`, ` { "x" : [ ] , "y" : { } } `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		_, got := duplicateMember(raw)
		if want := hasDupesReference(raw); got != want {
			t.Fatalf("%s: duplicate %v, reference %v", raw, got, want)
		}
	})
}
