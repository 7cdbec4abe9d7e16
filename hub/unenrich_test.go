package hub

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// A TD signed by its agent, served back by the directory (both enrichment
// paths), verifies after StripEnrichment, whatever shape its @context had.
func TestStripEnrichmentLetsTheSignersProofVerify(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for name, ctx := range map[string]string{
		"string":                          `"https://www.w3.org/2022/wot/td/v1.1"`,
		"td and lmos":                     `["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"https://eclipse.dev/lmos/protocol/v1"}]`,
		"td and discovery":                `["https://www.w3.org/2022/wot/td/v1.1","https://www.w3.org/2022/wot/discovery"]`,
		"all three":                       `["https://www.w3.org/2022/wot/td/v1.1","https://www.w3.org/2022/wot/discovery",{"lmos":"https://eclipse.dev/lmos/protocol/v1"}]`,
		"td 1.0 and a prefix":             `["https://www.w3.org/2019/wot/td/v1",{"saref":"https://saref.etsi.org/core/"}]`,
		"lmos with #":                     `["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"https://eclipse.dev/lmos/protocol/v1#"}]`,
		"legacy lmos beside another term": `["https://www.w3.org/2022/wot/td/v1.1",{"saref":"https://saref.etsi.org/core/","lmos":"https://eclipse.dev/lmos/protocol/v1"}]`,
	} {
		raw := []byte(`{"@context":` + ctx + `,"id":"urn:x","title":"Lamp","lmos:capabilities":[{"id":"c","name":"light","version":"1.0","description":"d","examples":[]}],` +
			`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc","properties":{"on":{"type":"boolean","forms":[{"href":"mqtt://h/x"}]}}}`)
		signed, err := proof.Sign(raw, priv, now)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := ParseDocument(signed)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		th := &Thing{ID: "urn:x", Meta: testMeta()}
		viaMap, _ := json.Marshal(th.Enriched(doc, now))
		viaJSON := th.AppendEnrichedJSON(nil, signed, now)
		for path, served := range map[string][]byte{"Enriched": viaMap, "AppendEnrichedJSON": viaJSON} {
			if _, err := proof.VerifyWithKey(served, pub); err == nil {
				t.Fatalf("%s/%s: the served document verifies as it is; the test proves nothing", name, path)
			}
			stripped, err := StripEnrichment(served)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, path, err)
			}
			r, err := proof.Verify(stripped)
			if err != nil {
				t.Fatalf("%s/%s: %v\nserved   %s\nstripped %s", name, path, err, served, stripped)
			}
			if r.DID != proof.DID(pub) {
				t.Fatalf("%s/%s: DID %s", name, path, r.DID)
			}
		}
	}
}

// Stripping removes only what the hub adds: a change to the signer's own
// members, or a context beyond the hub's additions, still fails.
func TestStripEnrichmentKeepsTamperingVisible(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	raw := []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:x","title":"Lamp","securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`)
	signed, _ := proof.Sign(raw, priv, now)
	doc, _ := ParseDocument(signed)
	th := &Thing{ID: "urn:x", Meta: testMeta()}
	for name, change := range map[string]func(map[string]any){
		"title":         func(m map[string]any) { m["title"] = "Door" },
		"extra context": func(m map[string]any) { m["@context"] = append(m["@context"].([]any), "https://example.com/evil") },
		"extra member":  func(m map[string]any) { m["lmos:capabilities"] = []any{} },
	} {
		served := th.Enriched(doc, now)
		change(served)
		b, _ := json.Marshal(served)
		stripped, err := StripEnrichment(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := proof.Verify(stripped); !errors.Is(err, proof.ErrInvalidSignature) {
			t.Errorf("%s: %v, want ErrInvalidSignature", name, err)
		}
	}
	if _, err := StripEnrichment([]byte(`[1]`)); err == nil {
		t.Error("an array was stripped")
	}
}

// Every TD the hub serves defines lmos with the '#' IRI (a JSON-LD 1.1
// prefix), whether it defined lmos itself, with the legacy IRI or not at
// all; and a copy served before (the legacy term added) still verifies
// after StripEnrichment.
func TestServedContextDefinesLMOSWithHash(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for name, ctx := range map[string]string{
		"string":      `"https://www.w3.org/2022/wot/td/v1.1"`,
		"legacy lmos": `["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"https://eclipse.dev/lmos/protocol/v1"}]`,
		"lmos with #": `["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"https://eclipse.dev/lmos/protocol/v1#"}]`,
	} {
		raw := []byte(`{"@context":` + ctx + `,"@type":"lmos:Agent","id":"urn:x","title":"Lamp","securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`)
		signed, err := proof.Sign(raw, priv, now)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := ParseDocument(signed)
		if err != nil {
			t.Fatal(err)
		}
		th := &Thing{ID: "urn:x", Meta: testMeta()}
		for path, served := range map[string][]byte{"Enriched": marshalT(t, th.Enriched(doc, now)), "AppendEnrichedJSON": th.AppendEnrichedJSON(nil, signed, now)} {
			var got struct {
				Context []any `json:"@context"`
			}
			if err := json.Unmarshal(served, &got); err != nil {
				t.Fatal(err)
			}
			defs := 0
			for _, e := range got.Context {
				if m, ok := e.(map[string]any); ok && m["lmos"] != nil {
					defs++
					if m["lmos"] != ContextLMOS {
						t.Errorf("%s/%s: lmos is %v, want %s", name, path, m["lmos"], ContextLMOS)
					}
				}
			}
			if defs != 1 {
				t.Errorf("%s/%s: %d definitions of lmos in %v", name, path, defs, got.Context)
			}
		}
		// A copy served by a version before the '#'.
		old := th.Enriched(doc, now)
		var signedCtx any
		_ = json.Unmarshal([]byte(ctx), &signedCtx)
		old["@context"] = legacyEnrichedContext(signedCtx)
		stripped, err := StripEnrichment(marshalT(t, old))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := proof.Verify(stripped); err != nil || r.DID != proof.DID(pub) {
			t.Errorf("%s: a copy served before the '#' does not verify: %v\n%s", name, err, stripped)
		}
	}
}

func marshalT(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
