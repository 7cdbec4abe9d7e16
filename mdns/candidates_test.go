package mdns

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// TestLMOSHubDID: a directory TD is an lmos-hub's when it is a
// ThingDirectory with an lmos:broker link, signed by a did:key; the DID
// is the signer's. Anything else is refused with the reason.
func TestLMOSHubDID(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	sign := func(doc string) []byte {
		b, err := proof.Sign([]byte(doc), priv, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hubTD := `{"@type":["ThingDirectory"],"title":"H","links":[{"rel":"lmos:broker","href":"mqtt://h:1883"}]}`
	did, err := lmosHubDID(sign(hubTD))
	if err != nil || did != proof.DID(pub) {
		t.Fatalf("signed hub TD: %q %v", did, err)
	}
	tampered := strings.Replace(string(sign(hubTD)), `"title":"H"`, `"title":"X"`, 1)
	for name, c := range map[string]struct {
		doc  []byte
		want string
	}{
		"unsigned":      {[]byte(hubTD), "not signed by its key"},
		"tampered":      {[]byte(tampered), "not signed by its key"},
		"no broker":     {sign(`{"@type":"ThingDirectory","links":[]}`), "no lmos:broker link"},
		"not directory": {sign(`{"@type":"Thing","links":[{"rel":"lmos:broker"}]}`), "not a ThingDirectory"},
		"not JSON":      {[]byte(`<html>`), "not a JSON object"},
	} {
		if _, err := lmosHubDID(c.doc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
