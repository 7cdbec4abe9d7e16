package mdns_test

import (
	"crypto/ed25519"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// A Thing announced over mDNS with a signed TD binds its id to the key.
// Once its announcement is gone and forgotten, another host announcing
// the id with a TD signed by another key, an unsigned one, or the owner's
// old signed TD (a replay) is refused, and nothing is stored; the owner's
// fresh TD registers it again, from any host.
func TestMDNSRegistrarKeepsBoundIDs(t *testing.T) {
	reg := newRegistry(t)
	id := "urn:test:signed-plug"
	sign := func(title string, k ed25519.PrivateKey, created time.Time) []byte {
		doc, err := proof.Sign(hubtest.BareTD(id, title), k, created)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	_, owner, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	did := proof.DID(owner.Public().(ed25519.PublicKey))
	_, port := tdServer(t, map[string][]byte{
		"/own":      sign("Plug", owner, time.Now().Add(-time.Minute)),
		"/other":    sign("Evil", other, time.Now()),
		"/unsigned": hubtest.BareTD(id, "Evil"),
		"/fresh":    sign("Plug again", owner, time.Now()),
	})
	r := newRegistrar(t, reg, 300*time.Millisecond)
	plug := entry("Plug", "plug-host", port, "td=/own", "type=Thing")
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: plug})
	waitFor(t, 10*time.Second, "registration", func() bool { _, err := reg.Get(id); return err == nil })
	if th, _ := reg.Get(id); th.Meta.Verified != did {
		t.Errorf("Verified = %q, want %s", th.Meta.Verified, did)
	}
	r.Handle(dnssd.Event{Kind: dnssd.Removed, Entry: plug, Reason: "goodbye"})
	waitFor(t, 10*time.Second, "forgotten", func() bool { _, err := reg.Get(id); return hub.ErrorCode(err) == hub.ENOTFOUND })
	bound, err := reg.Binding(id)
	if err != nil || bound.DID != did {
		t.Fatalf("binding after the Thing was forgotten: %+v, %v", bound, err)
	}
	for _, c := range []struct{ instance, path, code string }{
		{"Evil key", "/other", hub.EFORBIDDEN},
		{"Evil unsigned", "/unsigned", hub.EFORBIDDEN},
		{"Evil replay", "/own", hub.ECONFLICT},
	} {
		rej := r.Stats().Rejected
		e := entry(c.instance, "evil-host", port, "td="+c.path, "type=Thing")
		r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: e})
		waitFor(t, 10*time.Second, c.instance+" refused", func() bool { return r.Stats().Rejected > rej })
		if err := r.Problem(e.Key()); hub.ErrorCode(err) != c.code {
			t.Errorf("%s: problem %v, want code %s", c.instance, err, c.code)
		}
		if _, err := reg.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Errorf("%s registered the bound id: %v", c.instance, err)
		}
		if b, _ := reg.Binding(id); b != bound {
			t.Errorf("%s changed the binding: %+v", c.instance, b)
		}
		r.Handle(dnssd.Event{Kind: dnssd.Removed, Entry: e, Reason: "goodbye"})
	}
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Plug", "new-host", port, "td=/fresh", "type=Thing")})
	waitFor(t, 10*time.Second, "the owner's fresh TD", func() bool { th, err := reg.Get(id); return err == nil && th.Meta.Verified == did })
}

// With security.requireSigned, an announced Thing serving an unsigned TD
// is refused (403, the setting named) and nothing is stored; a signed one
// registers.
func TestMDNSRegistrarRequiresSigned(t *testing.T) {
	reg, _ := regtest.Open(t, hub.RegistryOptions{Logger: hubtest.Logger(t), Security: hub.SecurityOptions{RequireSigned: true}})
	_, key, _ := ed25519.GenerateKey(nil)
	signed, err := proof.Sign(hubtest.BareTD("urn:test:s", "S"), key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, port := tdServer(t, map[string][]byte{"/unsigned": hubtest.BareTD("urn:test:u", "U"), "/signed": signed})
	r := newRegistrar(t, reg, time.Hour)
	e := entry("Unsigned", "u-host", port, "td=/unsigned")
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: e})
	waitFor(t, 10*time.Second, "the refusal", func() bool { return r.Stats().Rejected == 1 })
	if err := r.Problem(e.Key()); hub.RefusalReason(err) != "security.requireSigned" || reg.Count() != 0 {
		t.Errorf("problem %v, %d Things", err, reg.Count())
	}
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Signed", "s-host", port, "td=/signed")})
	waitFor(t, 10*time.Second, "the signed Thing", func() bool { _, err := reg.Get("urn:test:s"); return err == nil })
}
