package proof

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Verification canonicalizes the signed document once, proof and all, and
// takes the document and the proof configuration out of that canonical
// form: RFC 8785 writes an object as its members, sorted, each as
// "name":canonical value, so the canonical form of the document with one
// member removed is the whole one with that member's bytes (and a comma)
// removed, and a member's value in it is that value's canonical form.
// Walking a canonical form needs no JSON parser: jsontext made it, so it
// has no whitespace and strings escape only '"', '\' and control
// characters (each as a backslash and more); the walk below only skips
// strings and counts brackets, and still refuses anything else.

// errCanonical: a canonical form is not shaped as canonicalize writes it
// (never, unless jsontext changed; the walk does not trust it blindly).
var errCanonical = errors.New("not a canonical JSON form")

// canonical returns the JSON value b canonicalized (RFC 8785: members
// sorted by UTF-16 code units, numbers as ECMAScript prints doubles,
// strings in their shortest escaping, I-JSON: valid UTF-8, no duplicate
// names), in a new buffer.
func canonical(b []byte) ([]byte, error) {
	v := jsontext.Value(bytes.Clone(b))
	if err := v.Canonicalize(); err != nil {
		return nil, err
	}
	// jsontext writes a number beyond the doubles as the largest one;
	// RFC 8785 (3.2.2.3) makes it an error, as ECMAScript reads it as
	// Infinity. Only a document holding that largest number needs a look.
	if bytes.Contains(v, maxDouble) {
		if err := finiteNumbers(b); err != nil {
			return nil, err
		}
	}
	return v, nil
}

var maxDouble = []byte(strconv.FormatFloat(math.MaxFloat64, 'g', -1, 64))

// finiteNumbers refuses a JSON text with a number no double holds.
func finiteNumbers(b []byte) error {
	d := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := d.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if tok.Kind() == '0' {
			if _, err := strconv.ParseFloat(tok.String(), 64); err != nil {
				return fmt.Errorf("the number %s is beyond the range of a double (RFC 8785)", tok.String())
			}
		}
	}
}

// canonStringEnd returns the index after the string that starts at c[i]
// ('"'), or -1 when it does not end.
func canonStringEnd(c []byte, i int) int {
	for j := i + 1; j < len(c); j++ {
		switch c[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// canonValueEnd returns the index after the value that starts at c[i], or
// -1 when it does not end inside c.
func canonValueEnd(c []byte, i int) int {
	depth := 0
	for i < len(c) {
		switch c[i] {
		case '"':
			if i = canonStringEnd(c, i); i < 0 || depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or literal in a container
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	if depth == 0 {
		return i // a number or literal at the very end
	}
	return -1
}

// canonMembers calls fn for each member of c, an object in canonical form,
// in order: its index, its name as it stands (quoted, escaped), its value,
// and the span [from, to) that canonCut removes to drop it (from the comma
// before it, or its name for the first).
func canonMembers(c []byte, fn func(i int, name, value []byte, from, to int) error) error {
	if len(c) < 2 || c[0] != '{' || c[len(c)-1] != '}' {
		return errCanonical
	}
	for i, n := 1, 0; i < len(c)-1; n++ {
		from := i
		if n > 0 {
			if c[i] != ',' {
				return errCanonical
			}
			i++
		}
		ne := -1
		if i < len(c) && c[i] == '"' {
			ne = canonStringEnd(c, i)
		}
		if ne < 0 || ne >= len(c) || c[ne] != ':' {
			return errCanonical
		}
		ve := canonValueEnd(c, ne+1)
		if ve <= ne+1 || ve >= len(c) {
			return errCanonical
		}
		if err := fn(n, c[i:ne], c[ne+1:ve], from, ve); err != nil {
			return err
		}
		i = ve
	}
	return nil
}

// canonElements returns the elements of c, an array in canonical form.
func canonElements(c []byte) ([][]byte, error) {
	if len(c) < 2 || c[0] != '[' || c[len(c)-1] != ']' {
		return nil, errCanonical
	}
	var out [][]byte
	for i := 1; i < len(c)-1; {
		if len(out) > 0 {
			if c[i] != ',' {
				return nil, errCanonical
			}
			i++
		}
		ve := canonValueEnd(c, i)
		if ve <= i || ve >= len(c) {
			return nil, errCanonical
		}
		out = append(out, c[i:ve])
		i = ve
	}
	return out, nil
}

// canonCut returns a copy of c without the member canonMembers found at
// [from, to); the first member takes the comma after it along.
func canonCut(c []byte, from, to int, first bool) []byte {
	head, tail := canonSplit(c, from, to, first)
	out := make([]byte, 0, len(head)+len(tail))
	return append(append(out, head...), tail...)
}

// canonSplit is canonCut as the two pieces of c around the member, not
// copied.
func canonSplit(c []byte, from, to int, first bool) (head, tail []byte) {
	if first && to < len(c) && c[to] == ',' {
		to++
	}
	return c[:from], c[to:]
}
