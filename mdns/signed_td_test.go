package mdns_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// A TD signed by its agent (PROTOCOL §6) is fetched, validated and stored
// as it was served: its proof still verifies by the agent's DID.
func TestMDNSRegistrarStoresASignedTDUnchanged(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signed, err := proof.SignMilli(hubtest.BareTD("urn:test:signed-lamp", "Lamp"), priv, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t)
	_, port := tdServer(t, map[string][]byte{"/td": signed})
	r := newRegistrar(t, reg, time.Minute)
	r.Handle(dnssd.Event{Kind: dnssd.Added, Entry: entry("Lamp", "lamp-host", port, "td=/td", "type=Thing")})
	waitFor(t, 10*time.Second, "registration", func() bool { _, err := reg.Get("urn:test:signed-lamp"); return err == nil })
	raw, err := reg.Raw("urn:test:signed-lamp")
	if err != nil {
		t.Fatal(err)
	}
	res, err := proof.Verify(raw)
	if err != nil {
		t.Fatalf("the stored TD does not verify: %v\n%s", err, raw)
	}
	if res.DID != proof.DID(priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("signed by %s", res.DID)
	}
}
