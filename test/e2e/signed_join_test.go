package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// A TD signed as PROTOCOL §6 says joins over MQTT from a client nobody in
// this project wrote (Python paho-mqtt 1.6.1, MQTT 5, pahoJoinScript: it
// fails on any disconnect, refused subscription or missing result): the
// join is accepted and the hub stores the document unchanged, so its proof
// verifies by the signer's DID.
func TestSignedTDJoinsOverMQTTWithPaho(t *testing.T) {
	h := startHub(t, nil)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	const id = "urn:example:signed-mosq"
	signed, err := proof.SignMilli(makeTD(id, "Signed sensor"), priv, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	topic := "lmos/v1/things/" + lmos.TopicKey(id) + "/td"
	out, _ := runPaho(t, h, 30*time.Second, pahoJoinScript, topic, lmos.MediaTD, hex.EncodeToString(signed))
	var res lmos.JoinResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || res.Status != lmos.JoinAccepted {
		t.Fatalf("join result %q: %v", out, err)
	}
	resp, raw := h.do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %s", resp.StatusCode, raw)
	}
	if r, err := proof.Verify(raw); err != nil || r.DID != did {
		t.Fatalf("the stored TD: %v, DID %s want %s\n%s", err, r.DID, did, raw)
	}
}
