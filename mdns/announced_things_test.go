package mdns_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/mdns"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// These tests drive the Registrar with browser events for agents served
// on loopback: no multicast, a real registry over a real store in a temp
// dir, as Main wires them. An external test package, so that it may use
// test/kit/hubtest's helpers (hubtest imports the app, which imports mdns).

// newRegistry opens a store in a temp dir and a registry over it.
func newRegistry(t *testing.T) *hub.Registry {
	t.Helper()
	reg, _ := regtest.Open(t, hub.RegistryOptions{Logger: hubtest.Logger(t)})
	return reg
}

// putOverHTTP registers a Thing as the directory API's PUT does.
func putOverHTTP(t *testing.T, reg *hub.Registry, id string, td []byte) {
	t.Helper()
	if _, err := reg.Put(t.Context(), id, td, hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, d, what, cond)
}

// tdServer serves the TDs of the bad-input cases.
func tdServer(t *testing.T, docs map[string][]byte) (*httptest.Server, int) {
	t.Helper()
	mux := http.NewServeMux()
	for path, doc := range docs {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/td+json")
			w.Write(doc)
		})
	}
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, srv.Listener.Addr().(*net.TCPAddr).Port
}

func entry(name, host string, port int, txt ...string) dnssd.Entry {
	return dnssd.Entry{Instance: name, Service: "_wot._tcp", Host: host + ".local.", Port: port,
		Text: txt, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Iface: "lo"}
}

func newRegistrar(t *testing.T, reg *hub.Registry, forget time.Duration) *mdns.Registrar {
	t.Helper()
	r := mdns.NewRegistrar(reg, mdns.RegistrarConfig{
		ForgetAfter: forget, FetchTimeout: 300 * time.Millisecond, MaxTDBytes: 4096,
		Logger: hubtest.Logger(t),
	})
	t.Cleanup(func() { r.Close() })
	return r
}

// waitForgotten waits until the Registrar has forgotten the mDNS Thing gone
// and counted it (the counter moves after the deletion commits), and checks
// that kept, registered over HTTP, is still there.
func waitForgotten(t *testing.T, r *mdns.Registrar, reg *hub.Registry, gone, kept string) {
	t.Helper()
	waitFor(t, 10*time.Second, "forgotten", func() bool { _, err := reg.Get(gone); return hub.ErrorCode(err) == hub.ENOTFOUND })
	if _, err := reg.Get(kept); err != nil {
		t.Errorf("the HTTP Thing was removed too: %v", err)
	}
	waitFor(t, 2*time.Second, "Forgotten counted", func() bool { return r.Stats().Forgotten == 1 })
}

func TestMDNSRegistrarBadInput(t *testing.T) {
	reg := newRegistry(t)
	big := hubtest.BareTD("urn:test:big", strings.Repeat("x", 5000))
	_, port := tdServer(t, map[string][]byte{
		"/invalid": []byte(`{"id":"urn:test:invalid","title":"no security"}`),
		"/notjson": []byte(`<html>`),
		"/noid":    []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"x","securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`),
		"/huge":    big,
	})
	r := newRegistrar(t, reg, time.Hour)
	cases := []struct {
		name string
		txt  []string
		want string
	}{
		{"no td", []string{"type=Thing"}, "no td key"},
		{"relative td", []string{"td=td.json"}, "not an absolute path"},
		{"bad scheme", []string{"td=/ok", "scheme=ftp"}, "not http or https"},
		{"404", []string{"td=/missing"}, "404"},
		{"timeout", []string{"td=/slow"}, "no answer within 300ms"},
		{"huge", []string{"td=/huge"}, "larger than the limit of 4096 bytes (registry.maxTDBytes)"},
		{"invalid", []string{"td=/invalid"}, "cannot register the fetched TD"},
		{"not json", []string{"td=/notjson"}, "cannot register the fetched TD"},
		{"no id", []string{"td=/noid"}, "has no id"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := r.Stats().Rejected
			e := entry(c.name, "h", port, c.txt...)
			r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: e})
			waitFor(t, 10*time.Second, "the rejection", func() bool { return r.Stats().Rejected > before })
			if err := r.Problem(e.Key()); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("problem = %v, want it to say %q", err, c.want)
			}
			if n := reg.Count(); n != 0 {
				t.Errorf("case %d: registry holds %d Things, want 0", i, n)
			}
		})
	}
	if s := r.Stats(); s.Registered != 0 {
		t.Errorf("stats = %+v", s)
	}
	// Another directory (type=Directory) is not registered, nor counted.
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("other hub", "h", port, "td=/.well-known/wot", "type=Directory")})
	time.Sleep(50 * time.Millisecond)
	if s := r.Stats(); s.Registered != 0 || s.Rejected != uint64(len(cases)) {
		t.Errorf("after a directory: stats = %+v", s)
	}
}

func TestMDNSRegistrarLifecycle(t *testing.T) {
	reg := newRegistry(t)
	_, port := tdServer(t, map[string][]byte{
		"/td":    hubtest.BareTD("urn:test:lamp", "Lamp"),
		"/td2":   hubtest.BareTD("urn:test:lamp", "Lamp v2"),
		"/spoof": hubtest.BareTD("urn:test:lamp", "Evil lamp"),
		"/taken": hubtest.BareTD("urn:test:http-thing", "Stolen"),
	})
	r := newRegistrar(t, reg, 500*time.Millisecond)
	lamp := entry("Lamp", "lamp-host", port, "td=/td", "type=Thing")

	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: lamp})
	waitFor(t, 10*time.Second, "registration", func() bool { _, err := reg.Get("urn:test:lamp"); return err == nil })
	th, _ := reg.Get("urn:test:lamp")
	if th.Meta.Origin.Source != hub.SourceMDNS {
		t.Errorf("origin = %+v", th.Meta.Origin)
	}
	waitFor(t, 10*time.Second, "online", func() bool {
		th, _ := reg.Get("urn:test:lamp")
		return th.Meta.Presence.Status == hub.PresenceOnline && th.Meta.Presence.Via == hub.SourceMDNS
	})

	// A spoofed announcement of the same id by another instance on
	// another host is refused; the stored TD stays.
	rej := r.Stats().Rejected
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Lamp", "evil-host", port, "td=/spoof")})
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Evil", "evil-host", port, "td=/spoof")})
	waitFor(t, 10*time.Second, "two rejections", func() bool { return r.Stats().Rejected >= rej+2 })
	if raw, _ := reg.Raw("urn:test:lamp"); !bytes.Contains(raw, []byte(`"Lamp"`)) {
		t.Errorf("spoof overwrote the TD: %s", raw)
	}
	// A Thing registered over HTTP is not taken over by mDNS.
	putOverHTTP(t, reg, "urn:test:http-thing", hubtest.BareTD("urn:test:http-thing", "Mine"))
	rej = r.Stats().Rejected
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Thief", "t", port, "td=/taken")})
	waitFor(t, 10*time.Second, "rejection", func() bool { return r.Stats().Rejected > rej })
	if raw, _ := reg.Raw("urn:test:http-thing"); !bytes.Contains(raw, []byte(`"Mine"`)) {
		t.Errorf("mDNS overwrote an HTTP Thing: %s", raw)
	}

	// TXT change → re-fetched.
	lamp2 := entry("Lamp", "lamp-host", port, "td=/td2", "type=Thing")
	r.Handle(dnssd.Event{Kind: dnssd.Updated, Entry: lamp2})
	waitFor(t, 10*time.Second, "re-fetch", func() bool { raw, _ := reg.Raw("urn:test:lamp"); return bytes.Contains(raw, []byte("Lamp v2")) })

	// Goodbye → offline; unseen for forgetAfter → removed.
	r.Handle(dnssd.Event{Kind: dnssd.Removed, Entry: lamp2, Reason: "goodbye"})
	waitFor(t, 10*time.Second, "offline", func() bool {
		th, err := reg.Get("urn:test:lamp")
		return err == nil && th.Meta.Presence.Status == hub.PresenceOffline
	})
	waitForgotten(t, r, reg, "urn:test:lamp", "urn:test:http-thing")
	if s := r.Stats(); s.Forgotten != 1 || s.Offline != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// A flood of announcements costs bounded work: a fixed number of fetch
// workers, a bounded queue, no goroutine per announcement.
func TestMDNSRegistrarFlood(t *testing.T) {
	reg := newRegistry(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		time.Sleep(20 * time.Millisecond)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	r := newRegistrar(t, reg, time.Hour)
	base := runtime.NumGoroutine()
	peak := 0
	for i := 0; i < 5000; i++ {
		r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry(fmt.Sprint("flood ", i), "f", port, "td=/td")})
		if i%100 == 0 {
			peak = max(peak, runtime.NumGoroutine())
		}
	}
	if peak > base+40 {
		t.Errorf("goroutines grew from %d to %d during the flood", base, peak)
	}
	s := r.Stats()
	if s.Dropped == 0 {
		t.Errorf("no announcement dropped from a flood of 5000: %+v", s)
	}
	waitFor(t, 10*time.Second, "the queue to drain", func() bool { s := r.Stats(); return s.Rejected+s.Dropped == 5000 })
	if n := reg.Count(); n != 0 {
		t.Errorf("registry holds %d Things", n)
	}
}

// At start the Registrar sets stored mDNS Things offline (nothing has been
// seen yet) and forgets them after forgetAfter unless announced again;
// Things of other origins are left alone.
func TestMDNSRegistrarAdoptsStoredThings(t *testing.T) {
	reg := newRegistry(t)
	ctx := t.Context()
	if _, err := reg.Put(ctx, "urn:test:old", hubtest.BareTD("urn:test:old", "Old"), hub.Origin{Source: hub.SourceMDNS}); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetPresence(ctx, "urn:test:old", hub.PresenceOnline, hub.SourceMDNS); err != nil {
		t.Fatal(err)
	}
	putOverHTTP(t, reg, "urn:test:http", hubtest.BareTD("urn:test:http", "HTTP"))
	r := newRegistrar(t, reg, 300*time.Millisecond)
	if th, _ := reg.Get("urn:test:old"); th.Meta.Presence.Status != hub.PresenceOffline {
		t.Errorf("presence at start = %+v, want offline", th.Meta.Presence)
	}
	waitForgotten(t, r, reg, "urn:test:old", "urn:test:http")
	if s := r.Stats(); s.Forgotten != 1 || s.Registered != 0 {
		t.Errorf("stats = %+v", s)
	}
}
