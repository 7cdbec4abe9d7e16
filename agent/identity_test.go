package agent

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// storedProof reads the Thing's TD as the hub stored it and as it serves
// it, checks that both carry a proof by did, and returns its created.
func (h *testHub) storedProof(id, did string) time.Time {
	h.t.Helper()
	resp, raw := h.Do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("GET %s: %d %s", id, resp.StatusCode, raw)
	}
	r, err := proof.Verify(raw)
	if err != nil {
		h.t.Fatalf("the TD the hub stored for %s does not verify: %v\n%s", id, err, raw)
	}
	if r.DID != did {
		h.t.Fatalf("the stored TD is signed by %s, the agent is %s", r.DID, did)
	}
	_, served := h.Do(http.MethodGet, lmos.ThingPath(id), "", nil, "")
	plain, err := hub.StripEnrichment(served)
	if err != nil {
		h.t.Fatal(err)
	}
	if r2, err := proof.Verify(plain); err != nil || r2.DID != did {
		h.t.Fatalf("the served TD does not verify after StripEnrichment: %v (DID %s)", err, r2.DID)
	}
	return r.Created
}

// The agent makes its key in its state directory (0600) on first use and
// keeps it; it signs its TD on every join (the first, a re-join after a
// lost connection, a restart) with a created later than the last one.
func TestAgentSignsItsTDOnEveryJoin(t *testing.T) {
	eachLink(t, func(t *testing.T, h *testHub) {
		const id = "urn:test:signed/1"
		state := t.TempDir()
		a := h.connect(id, func(o *Options) { o.StateDir = state })
		did := a.DID()
		fi, err := os.Stat(filepath.Join(state, KeyFileName))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("the agent's key file has mode %v, want 0600", fi.Mode().Perm())
		}
		if k, err := proof.ReadKeyFile(filepath.Join(state, KeyFileName)); err != nil || k.DID != did {
			t.Fatalf("key file: %v, DID %s, agent %s", err, k.DID, did)
		}
		first := h.storedProof(id, did)

		// A lost connection: the agent re-joins with a new proof.
		dropConnection(a)
		var rejoined time.Time
		waitFor(t, 10*time.Second, "a re-join with a newer proof", func() bool {
			resp, raw := h.Do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
			if resp.StatusCode != http.StatusOK {
				return false
			}
			r, err := proof.Verify(raw)
			rejoined = r.Created
			return err == nil && r.Created.After(first)
		})
		h.storedProof(id, did)

		// A restart with the same state directory keeps the DID.
		creds := a.JoinCredentials()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		b := h.connect(id, func(o *Options) { o.StateDir = state; o.Credentials = creds })
		if b.DID() != did {
			t.Fatalf("the DID changed across a restart: %s, then %s", did, b.DID())
		}
		if again := h.storedProof(id, did); !again.After(rejoined) {
			t.Fatalf("the restarted agent's proof was created %v, not after the last one %v", again, rejoined)
		}
	})
}

// Over CBOR WebSocket frames the TD is transcoded on the way; JCS makes the
// proof hold for the JSON the hub stores.
func TestAgentSignedTDSurvivesCBORFrames(t *testing.T) {
	eachLinkOf(t, []string{"ws"}, func(t *testing.T, h *testHub) {
		const id = "urn:test:signed/cbor"
		td := testTD(id)
		td["properties"].(map[string]any)["level"].(map[string]any)["maximum"] = 37.5
		td["properties"].(map[string]any)["level"].(map[string]any)["minimum"] = -1e-7
		a := h.connect(id, func(o *Options) { o.ContentType = CBOR; o.TD = td; o.StateDir = t.TempDir() })
		h.storedProof(id, a.DID())
	})
}

// An agent with nowhere to keep a key joins unsigned: a key made for one
// run would bind its id to a key lost at the next start, and the hub would
// refuse the agent's own id then. A new instance of it joins again.
func TestAgentWithoutStateJoinsUnsigned(t *testing.T) {
	eachLink(t, func(t *testing.T, h *testHub) {
		const id = "urn:test:unsigned"
		a := h.connect(id, nil)
		if a.DID() != "" {
			t.Fatalf("an agent without a key has DID %q", a.DID())
		}
		resp, raw := h.Do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", id, resp.StatusCode, raw)
		}
		if _, err := proof.Verify(raw); !errors.Is(err, proof.ErrNoProof) {
			t.Fatalf("an agent without a key: the stored TD's proof: %v", err)
		}
		creds := a.JoinCredentials() // MQTT: its join's credentials stay its own
		a.Close()
		waitFor(t, 5*time.Second, "offline", func() bool { return h.presence(id) == hub.PresenceOffline })
		h.connect(id, func(o *Options) { o.Credentials = creds })
		waitFor(t, 5*time.Second, "the new instance online", func() bool { return h.presence(id) == hub.PresenceOnline })
	})
}

// An agent given a key signs with it, and keeps no key file of its own.
func TestAgentSignsWithTheKeyItIsGiven(t *testing.T) {
	eachLink(t, func(t *testing.T, h *testHub) {
		const id = "urn:test:signed/given"
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		state := t.TempDir()
		a := h.connect(id, func(o *Options) { o.Key = priv; o.StateDir = state })
		want := proof.DID(priv.Public().(ed25519.PublicKey))
		if a.DID() != want {
			t.Fatalf("DID %s, want the given key's %s", a.DID(), want)
		}
		h.storedProof(id, want)
		if _, err := os.Stat(filepath.Join(state, KeyFileName)); !os.IsNotExist(err) {
			t.Fatalf("the agent wrote a key file beside the key it was given: %v", err)
		}
	})
}

// Every proof is created after the one before: within one millisecond,
// with the clock set back, and across a restart on a clock set back.
func TestSignerCreatedOnlyMovesForward(t *testing.T) {
	state := t.TempDir()
	log := testLogger(t)
	clock := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	newS := func() *signer {
		s, err := newSigner(Options{StateDir: state}, log)
		if err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return clock }
		return s
	}
	doc := []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:x","title":"x"}`)
	var last time.Time
	signAt := func(s *signer, what string) time.Time {
		t.Helper()
		out, err := s.sign(doc)
		if err != nil {
			t.Fatal(err)
		}
		r, err := proof.Verify(out)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Created.After(last) {
			t.Fatalf("%s: created %v, not after the last proof %v", what, r.Created, last)
		}
		last = r.Created
		return r.Created
	}
	s := newS()
	if got := signAt(s, "first"); !got.Equal(clock) {
		t.Fatalf("first proof created %v, want the clock %v", got, clock)
	}
	signAt(s, "same millisecond")
	clock = clock.Add(-time.Hour)
	signAt(s, "clock set back")
	// A restart, still on the clock set back: the state directory
	// remembers the last proof.
	signAt(newS(), "restart on a clock set back")
	clock = clock.Add(2 * time.Hour)
	if got := signAt(newS(), "clock past the last proof"); !got.Equal(clock) {
		t.Fatalf("created %v, want the clock %v once it is past the last proof", got, clock)
	}
}
