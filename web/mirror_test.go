package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// A mirrored Thing is read-only on the directory API, even for an admin:
// PUT, PATCH and DELETE answer 403 naming the hub it lives on, and change
// nothing; it reads like any other Thing, marked as a mirror.
func TestMirroredThingIsReadOnlyOverHTTP(t *testing.T) {
	d := newDirectory(t)
	const from = "http://building-2.example:8080"
	if _, err := d.reg.Mirror(context.Background(), "urn:example:m", []byte(thingTD("urn:example:m", "M")), from); err != nil {
		t.Fatal(err)
	}
	before := d.do("GET", "/things/urn:example:m?enriched=false", "", "").want(t, "GET", http.StatusOK)
	rev := d.reg.Revision()
	for _, c := range []struct{ method, ctype, body string }{
		{"PUT", tdType, thingTD("urn:example:m", "X")},
		{"PATCH", patchType, `{"title":"X"}`},
		{"DELETE", "", ""},
	} {
		p := d.do(c.method, "/things/urn:example:m", c.ctype, c.body).problem(t, c.method, http.StatusForbidden, "forbidden")
		if !strings.Contains(p.Detail, "read-only mirror") || !strings.Contains(p.Detail, from) {
			t.Fatalf("%s: detail %q does not name the hub the Thing lives on", c.method, p.Detail)
		}
		after := d.do("GET", "/things/urn:example:m?enriched=false", "", "").want(t, "GET", http.StatusOK)
		if string(after.body) != string(before.body) || d.reg.Revision() != rev {
			t.Fatalf("%s changed the mirror: %s", c.method, after.body)
		}
	}
	got := d.do("GET", "/things/urn:example:m", "", "").want(t, "GET enriched", http.StatusOK)
	if !strings.Contains(string(got.body), `"lmos:origin":{"source":"remote","hub":"`+from+`"}`) {
		t.Fatalf("served mirror %s", got.body)
	}
}
