package mcpdoor

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseThingURI: a resource URI either names a Thing (and maybe a
// property) whose URI is made again the same way, or is refused.
func FuzzParseThingURI(f *testing.F) {
	for _, s := range []string{"lmos://things/urn%3Aa", "lmos://things/a/properties/b", "lmos://things/%zz", "lmos://things/", "lmos://things/a/properties/", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		id, prop, ok := parseThingURI(uri)
		if !ok {
			return
		}
		if id == "" {
			t.Fatalf("%q: empty id accepted", uri)
		}
		again := thingURI(id)
		if prop != "" {
			again += "/properties/" + url.PathEscape(prop)
		}
		id2, prop2, ok2 := parseThingURI(again)
		if !ok2 || id2 != id || prop2 != prop {
			t.Fatalf("%q → (%q, %q) → %q → (%q, %q, %v)", uri, id, prop, again, id2, prop2, ok2)
		}
	})
}

// FuzzUnwrapInput: arguments are either refused with an invalid-input
// error or become an action input that is JSON (or none).
func FuzzUnwrapInput(f *testing.F) {
	for _, s := range []string{`{"input":5}`, `{}`, `null`, `[1]`, `{"input":1,"x":2}`, `{"a":"b"}`, ` `, `{"input":`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, args string, wrapped bool) {
		for _, noInput := range []bool{true, false} {
			in, err := unwrapInput(json.RawMessage(args), wrapped, noInput)
			if err != nil {
				if !strings.Contains(err.Error(), "argument") && !strings.Contains(err.Error(), "input") {
					t.Fatalf("%q: unclear error %v", args, err)
				}
				continue
			}
			if in != nil && !json.Valid(in) && json.Valid([]byte(args)) {
				t.Fatalf("%q: input %q is not JSON", args, in)
			}
		}
	})
}

// FuzzRPCMethod: the method the door reads from a body is the one a
// case-sensitive reading gives (the SDK's), or the body is refused.
func FuzzRPCMethod(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"method":"a","Method":"b"}`, `{"result":{}}`,
		`{"method":"a","method":"b"}`, `{"METHOD":"x","id":2}`, `[]`, `{"method":5}`, `{"id":1}`, `{"method":"x","params":{"method":"y"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		method, ok := rpcMethod([]byte(body))
		if !ok {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("%q accepted but not a JSON object: %v", body, err)
		}
		var exact string
		if raw, has := m["method"]; has {
			if err := json.Unmarshal(raw, &exact); err != nil {
				t.Fatalf("%q: method %q but not a string", body, method)
			}
		}
		if exact != method {
			t.Fatalf("%q: the door reads %q, a case-sensitive reading %q", body, method, exact)
		}
	})
}
