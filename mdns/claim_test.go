package mdns_test

import (
	"crypto/ed25519"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/mdns"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// tdServerOn serves docs on ip (a loopback address other than 127.0.0.1
// stands for another host) and returns its port.
func tdServerOn(t *testing.T, ip string, docs map[string][]byte) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("cannot listen on %s: %v", ip, err)
	}
	mux := http.NewServeMux()
	for path, doc := range docs {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/td+json")
			w.Write(doc)
		})
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().(*net.TCPAddr).Port
}

// entryAt is entry for an instance whose address is ip.
func entryAt(name, host, ip string, port int, txt ...string) dnssd.Entry {
	e := entry(name, host, port, txt...)
	e.IPs = []net.IP{net.ParseIP(ip)}
	return e
}

// claimState is what a refused announcement must leave alone.
type claimState struct {
	state
	admitted bool
	groups   string
}

type state struct {
	raw, verified, presence string
	bound                   bool
}

func claimStateOf(t *testing.T, reg *hub.Registry, id string) claimState {
	t.Helper()
	th, err := reg.Get(id)
	if err != nil {
		t.Fatalf("the Thing %s is gone: %v", id, err)
	}
	raw, _ := reg.Raw(id)
	_, berr := reg.Binding(id)
	return claimState{state: state{raw: string(raw), verified: th.Meta.Verified, presence: th.Meta.Presence.Status, bound: berr == nil},
		admitted: th.Meta.Admitted, groups: strings.Join(reg.GroupsOf(id), ",")}
}

// Under join.mode approve a Thing announced from one host is approved by
// an admin while its instance keeps announcing. Another host's instance
// announcing the approved id — its TD signed by a key of its own, unsigned,
// or the stored TD replayed — is refused (403) before the real instance
// announces again, and nothing changes: no binding, still admitted, still
// in its group. The real instance then resumes it, and may bind it to its
// own key.
func TestMDNSStrangerCannotClaimAnApprovedThing(t *testing.T) {
	reg := newRegistry(t)
	const id = "urn:test:approved-plug"
	realPort := tdServerOn(t, "127.0.0.1", map[string][]byte{"/td": hubtest.BareTD(id, "Plug")})
	adm, err := hub.NewAdmission(reg, nil, "approve", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := mdns.NewRegistrar(reg, mdns.RegistrarConfig{FetchTimeout: 2 * time.Second, Admission: adm, Logger: hubtest.Logger(t)})
	t.Cleanup(func() { r.Close() })
	plug := entryAt("Plug", "plug-host", "127.0.0.1", realPort, "td=/td")
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: plug})
	waitFor(t, 10*time.Second, "parked", func() bool { return r.Stats().Parked == 1 })
	if err := adm.Approve(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Put(t.Context(), "urn:test:other", hubtest.BareTD("urn:test:other", "Other"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CreateGroup(t.Context(), hub.GroupSpec{ID: "home", Title: "Home", Members: []string{id, "urn:test:other"}}); err != nil {
		t.Fatal(err)
	}
	want := claimStateOf(t, reg, id)
	if !want.admitted || want.bound || want.groups != "home" {
		t.Fatalf("the approved Thing: %+v", want)
	}
	stored := []byte(want.raw)
	evilKey := newEd25519(t)
	evil, err := proof.Sign(hubtest.BareTD(id, "Evil"), evilKey, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	evilPort := tdServerOn(t, "127.0.0.2", map[string][]byte{"/signed": evil, "/unsigned": hubtest.BareTD(id, "Evil"), "/stored": stored})
	for _, path := range []string{"/signed", "/unsigned", "/stored"} {
		rej := r.Stats().Rejected
		e := entryAt("Evil"+path, "evil-host", "127.0.0.2", evilPort, "td="+path)
		r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: e})
		waitFor(t, 10*time.Second, path+" refused", func() bool { return r.Stats().Rejected > rej })
		if err := r.Problem(e.Key()); hub.ErrorCode(err) != hub.EFORBIDDEN || !strings.Contains(err.Error(), "registered from another address") {
			t.Errorf("%s: problem %v, want forbidden", path, err)
		}
		if got := claimStateOf(t, reg, id); got != want {
			t.Errorf("%s changed the Thing: %+v, want %+v", path, got, want)
		}
	}
	// The real instance resumes it and binds it to its own key.
	r.Handle(dnssd.Event{Kind: dnssd.Updated, Entry: plug})
	waitFor(t, 10*time.Second, "resumed", func() bool {
		th, _ := reg.Get(id)
		return th.Meta.Presence.Status == hub.PresenceOnline
	})
	ownKey := newEd25519(t)
	own, err := proof.Sign(hubtest.BareTD(id, "Plug"), ownKey, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ownPort := tdServerOn(t, "127.0.0.1", map[string][]byte{"/td": own})
	r.Handle(dnssd.Event{Kind: dnssd.Updated, Entry: entryAt("Plug", "plug-host", "127.0.0.1", ownPort, "td=/td")})
	waitFor(t, 10*time.Second, "bound by its own instance", func() bool {
		b, err := reg.Binding(id)
		return err == nil && b.DID == proof.DID(ownKey.Public().(ed25519.PublicKey))
	})
	if th, _ := reg.Get(id); !th.Meta.Admitted {
		t.Errorf("its own instance's signed TD lost the admission")
	}
}

// After a restart the hub knows no instance of its stored mDNS Things:
// another host announcing one, signed by its own key, is refused and
// changes nothing; the Thing's own host resumes it.
func TestMDNSStrangerCannotClaimAStoredThingAfterRestart(t *testing.T) {
	reg := newRegistry(t)
	const id = "urn:test:stored-plug"
	realPort := tdServerOn(t, "127.0.0.1", map[string][]byte{"/td": hubtest.BareTD(id, "Plug")})
	plug := entryAt("Plug", "plug-host", "127.0.0.1", realPort, "td=/td")
	first := newRegistrar(t, reg, time.Hour)
	first.Handle(dnssd.Event{Kind: dnssd.Added, Entry: plug})
	waitFor(t, 10*time.Second, "registered", func() bool { _, err := reg.Get(id); return err == nil })
	if err := reg.Patch(t.Context(), id, []byte(`{}`)); err != nil { // an admin trusts it
		t.Fatal(err)
	}
	first.Close()

	r := newRegistrar(t, reg, time.Hour) // the hub started again
	want := claimStateOf(t, reg, id)
	if !want.admitted || want.presence != hub.PresenceOffline {
		t.Fatalf("the stored Thing: %+v", want)
	}
	evil, err := proof.Sign(hubtest.BareTD(id, "Evil"), newEd25519(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	evilPort := tdServerOn(t, "127.0.0.2", map[string][]byte{"/td": evil})
	e := entryAt("Plug", "plug-host", "127.0.0.2", evilPort, "td=/td") // even the same instance name
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: e})
	waitFor(t, 10*time.Second, "refused", func() bool { return r.Stats().Rejected == 1 })
	if err := r.Problem(e.Key()); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Errorf("problem %v, want forbidden", err)
	}
	if got := claimStateOf(t, reg, id); got != want {
		t.Errorf("the refused claim changed the Thing: %+v, want %+v", got, want)
	}
	r.Handle(dnssd.Event{Kind: dnssd.Updated, Entry: plug})
	waitFor(t, 10*time.Second, "resumed from its own host", func() bool {
		th, _ := reg.Get(id)
		return th.Meta.Presence.Status == hub.PresenceOnline
	})
}

func newEd25519(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
