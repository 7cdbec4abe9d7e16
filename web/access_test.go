package web_test

import (
	"net/http"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// With anonymous operate (the default), a page of another site must not
// invoke or write through a LAN browser (a bodiless POST is a "simple"
// request no CORS preflight stops): 403, and the Thing gets nothing. The
// hub's own pages, allowed origins, programs without Origin and requests
// with a token pass.
func TestAnonymousCrossSiteWritesRefused(t *testing.T) {
	d, lamp := newProxy(t)
	act, on := lampPath+"/actions/dim", lampPath+"/properties/on"
	for _, c := range []refusal{
		{what: "cross-site invocation", method: "POST", path: act, ctype: lmos.MediaJSON, body: "1",
			header: []string{"Authorization", "", "Origin", "http://evil.example"}, status: 403, code: hub.EFORBIDDEN},
		{what: "cross-site write", method: "PUT", path: on, ctype: lmos.MediaJSON, body: "true",
			header: []string{"Authorization", "", "Origin", "http://evil.example:8080"}, status: 403, code: hub.EFORBIDDEN},
	} {
		c.check(t, d)
	}
	if got := lamp.delivered(); len(got) != 0 {
		t.Fatalf("the Thing got %d refused interactions", len(got))
	}
	host := d.url[len("http://"):]
	d.do("POST", act, lmos.MediaJSON, "1", "Authorization", "", "Origin", "http://"+host).want(t, "same-origin anonymous invocation", http.StatusOK)
	d.do("POST", act, lmos.MediaJSON, "1", "Authorization", "").want(t, "anonymous invocation without Origin", http.StatusOK)
	d.do("POST", act, lmos.MediaJSON, "1", "Origin", "http://evil.example").want(t, "cross-site invocation with a token", http.StatusOK)
	if got := lamp.delivered(); len(got) != 3 {
		t.Fatalf("the Thing got %d invocations, want 3", len(got))
	}
}
