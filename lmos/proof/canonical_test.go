package proof

import (
	"bytes"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// The walk over canonical forms agrees with jsontext's own tokenizer on
// every canonical object and array: the same members (names and values)
// and elements, and cutting a member out leaves the canonical form of the
// object without it.
func FuzzCanonMembers(f *testing.F) {
	f.Add([]byte(`{"b":[1,{"x":"}"}],"a":"\"\\","c":{},"d":[],"e":null,"f":-1.5e-7}`))
	f.Add([]byte(`{"proof":{"type":"t","proofValue":"z1"},"@context":["a",{"b":"c"}]}`))
	f.Add([]byte(`[1,"a",[],{},[[]],true]`))
	f.Add([]byte(`{"a\u0000\n":"\u001f","é":"😀"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := canonical(in)
		if err != nil {
			return
		}
		switch c[0] {
		case '{':
			type member struct{ name, value string }
			var walked, tokenized []member
			var spans [][2]int
			err := canonMembers(c, func(i int, name, value []byte, from, to int) error {
				n, err := jsontext.AppendUnquote(nil, name)
				if err != nil {
					t.Fatalf("%s: name %s: %v", c, name, err)
				}
				walked = append(walked, member{string(n), string(value)})
				spans = append(spans, [2]int{from, to})
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if err := eachMember(c, func(i int, name string, value []byte, from, to int) error {
				tokenized = append(tokenized, member{name, string(value)})
				return nil
			}); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if len(walked) != len(tokenized) {
				t.Fatalf("%s: walked %q, tokenized %q", c, walked, tokenized)
			}
			for i := range walked {
				if walked[i] != tokenized[i] {
					t.Fatalf("%s: member %d walked %q, tokenized %q", c, i, walked[i], tokenized[i])
				}
				got := canonCut(c, spans[i][0], spans[i][1], i == 0)
				want, err := canonical(cutByName(t, c, walked[i].name))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s without %q: cut %s, want %s (%v)", c, walked[i].name, got, want, err)
				}
			}
		case '[':
			els, err := canonElements(c)
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			d := jsontext.NewDecoder(bytes.NewBuffer(c))
			if _, err := d.ReadToken(); err != nil {
				t.Fatal(err)
			}
			for i := 0; d.PeekKind() != ']'; i++ {
				v, err := d.ReadValue()
				if err != nil || i >= len(els) || !bytes.Equal(v, els[i]) {
					t.Fatalf("%s: element %d is %s (%v), walked %q", c, i, v, err, els)
				}
				if i == len(els)-1 && d.PeekKind() != ']' {
					t.Fatalf("%s: walked only %q", c, els)
				}
			}
			if len(els) > 0 && !bytes.Equal(c, append(append([]byte("["), bytes.Join(els, []byte(","))...), ']')) {
				t.Fatalf("%s: walked %q", c, els)
			}
		}
	})
}

// cutByName is obj without its member name, by jsontext's tokenizer.
func cutByName(t *testing.T, obj []byte, name string) []byte {
	var out []byte
	if err := eachMember(obj, func(i int, n string, value []byte, from, to int) error {
		if n == name {
			out = cut(obj, from, to, i == 0)
		}
		return nil
	}); err != nil || out == nil {
		t.Fatalf("%s has no %q: %v", obj, name, err)
	}
	return out
}
