package mdns_test

import (
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/mdns"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// Under join mode approve a Thing announced over mDNS is new like any
// other: its fetched TD waits on the pending list (door mdns, its host as
// source), nothing reaches the registry, and announcing it again does not
// add a second entry; approval registers it as an mDNS Thing, and the
// registrar adopts it at its next announcement. Under closed it is refused.
func TestMDNSThingsWaitForApproval(t *testing.T) {
	reg := newRegistry(t)
	_, port := tdServer(t, map[string][]byte{"/td": hubtest.BareTD("urn:test:plug", "Plug")})
	adm, err := hub.NewAdmission(reg, nil, "approve", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := mdns.NewRegistrar(reg, mdns.RegistrarConfig{FetchTimeout: 2 * time.Second, Admission: adm, Logger: hubtest.Logger(t)})
	t.Cleanup(func() { r.Close() })
	plug := entry("Plug", "plug-host", port, "td=/td")
	for i := 1; i <= 2; i++ {
		r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: plug})
		waitFor(t, 10*time.Second, "parked", func() bool { return r.Stats().Parked == uint64(i) })
	}
	st := adm.State(true)
	if len(st.Pending) != 1 || st.Pending[0].ID != "urn:test:plug" || st.Pending[0].Door != hub.SourceMDNS || st.Pending[0].Addr != "127.0.0.1" {
		t.Fatalf("pending %+v", st.Pending)
	}
	if _, err := reg.Get("urn:test:plug"); hub.ErrorCode(err) != hub.ENOTFOUND || r.Stats().Registered != 0 {
		t.Fatalf("a pending mDNS Thing reached the registry: %v", err)
	}
	if err := adm.Approve(t.Context(), "urn:test:plug"); err != nil {
		t.Fatal(err)
	}
	if th, err := reg.Get("urn:test:plug"); err != nil || th.Meta.Origin.Source != hub.SourceMDNS {
		t.Fatalf("approved: %+v %v", th, err)
	}
	r.Handle(dnssd.Event{Kind: dnssd.Updated, Entry: plug})
	waitFor(t, 10*time.Second, "adopted", func() bool {
		th, _ := reg.Get("urn:test:plug")
		return th.Meta.Presence.Status == hub.PresenceOnline
	})

	closed, err := hub.NewAdmission(reg, nil, "closed", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, port2 := tdServer(t, map[string][]byte{"/td": hubtest.BareTD("urn:test:other", "Other")})
	r2 := mdns.NewRegistrar(reg, mdns.RegistrarConfig{FetchTimeout: 2 * time.Second, Admission: closed, Logger: hubtest.Logger(t)})
	t.Cleanup(func() { r2.Close() })
	r2.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Other", "other-host", port2, "td=/td")})
	waitFor(t, 10*time.Second, "refused", func() bool { return r2.Stats().Rejected == 1 })
	if _, err := reg.Get("urn:test:other"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("closed hub registered an mDNS Thing: %v", err)
	}
}
