package agent

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// Over each link (MQTT, WebSocket JSON and CBOR): an agent added to a
// group receives its credential in its inbox, learns the hub's DID from
// it, and another member verifies it with the hub's status list; a
// tampered or foreign credential fails; the credential comes again after a
// reconnect; removal empties the inbox and revokes the credential.
func TestCredentials(t *testing.T) {
	cases := []struct{ link, ct string }{{"mqtt", JSON}, {"ws", JSON}, {"ws", CBOR}}
	for _, c := range cases {
		t.Run(c.link+"-"+c.ct, func(t *testing.T) {
			h := startHub(t)
			h.link = c.link
			const idA, idB = "urn:example:cred-a", "urn:example:cred-b"
			withCT := func(o *Options) { o.ContentType = c.ct }
			// A signs its description: over WebSocket only a registration
			// with its key's fresh proof is the member again after a
			// reconnect (an unsigned one could be anyone).
			_, keyA, _ := ed25519.GenerateKey(nil)
			a := h.connect(idA, func(o *Options) { withCT(o); o.Key = keyA })
			b := h.connect(idB, withCT)
			ctx := ctxT(t, 10*time.Second)
			if _, err := h.reg.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{idA, idB}}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "both credentials", func() bool {
				return a.Credentials()["kitchen"] != nil && b.Credentials()["kitchen"] != nil
			})
			if a.HubDID() != h.Main.DID() || b.HubDID() != h.Main.DID() {
				t.Fatalf("hub DID %q %q, want %q", a.HubDID(), b.HubDID(), h.Main.DID())
			}
			credA := a.Credentials()["kitchen"]
			m, err := b.VerifyMembership(ctx, credA)
			if err != nil {
				t.Fatal(err)
			}
			if m.Thing != idA || m.Group.ID != "kitchen" || m.Issuer != h.Main.DID() {
				t.Fatalf("membership %+v", m)
			}

			// Tampered, and minted by another key naming the same list.
			if _, err := b.VerifyMembership(ctx, bytes.Replace(credA, []byte("Kitchen"), []byte("Garage"), 1)); !errors.Is(err, vc.ErrProof) {
				t.Fatalf("tampered: %v", err)
			}
			// Tampered to name another status list: refused before anything
			// is fetched from where a forger points (issue 15 review: the
			// agent fetched it, then found the proof bad).
			var fetched atomic.Int32
			elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fetched.Add(1) }))
			defer elsewhere.Close()
			parsedA, _ := vc.ParseMembership(credA)
			pointed := bytes.ReplaceAll(credA, []byte(parsedA.StatusListURL), []byte(elsewhere.URL+"/list"))
			if _, err := b.VerifyMembership(ctx, pointed); !errors.Is(err, vc.ErrProof) || fetched.Load() != 0 {
				t.Fatalf("a credential pointing elsewhere: %v, %d requests there", err, fetched.Load())
			}
			other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
			parsed, _ := vc.ParseMembership(credA)
			forged, err := vc.IssueMembership(parsed, other)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.VerifyMembership(ctx, forged); !errors.Is(err, vc.ErrIssuer) {
				t.Fatalf("another issuer: %v", err)
			}

			// Forgotten, then given again on the next connection.
			a.vcs.mu.Lock()
			a.vcs.byGrp = nil
			a.vcs.mu.Unlock()
			dropConnection(a)
			waitFor(t, 10*time.Second, "the credential after a reconnect", func() bool { return a.Credentials()["kitchen"] != nil })

			if _, err := h.reg.RemoveMember(ctx, "kitchen", idA); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the ended membership", func() bool { return a.Credentials()["kitchen"] == nil })
			if _, err := b.VerifyMembership(ctx, credA); !errors.Is(err, vc.ErrRevoked) {
				t.Fatalf("revoked: %v", err)
			}
			if _, err := b.VerifyMembership(ctx, b.Credentials()["kitchen"]); err != nil {
				t.Fatalf("the remaining member: %v", err)
			}
		})
	}
}

// An agent that holds no credential does not know whom to trust until
// told (Options.HubDID).
func TestVerifyMembershipNeedsTheHub(t *testing.T) {
	h := startHub(t)
	const idA = "urn:example:cred-member"
	a := h.connect(idA, nil)
	ctx := ctxT(t, 10*time.Second)
	if _, err := h.reg.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{idA}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the credential", func() bool { return a.Credentials()["g"] != nil })
	cred := a.Credentials()["g"]

	stranger := h.connect("urn:example:stranger", nil)
	if _, err := stranger.VerifyMembership(ctx, cred); !errors.Is(err, ErrHubUnknown) {
		t.Fatalf("no hub known: %v", err)
	}
	pinned := h.connect("urn:example:pinned", func(o *Options) { o.HubDID = h.Main.DID() })
	if _, err := pinned.VerifyMembership(ctx, cred); err != nil {
		t.Fatal(err)
	}
	wrong := h.connect("urn:example:wrong-pin", func(o *Options) {
		o.HubDID = proof.DID(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32)).Public().(ed25519.PublicKey))
	})
	if _, err := wrong.VerifyMembership(ctx, cred); !errors.Is(err, vc.ErrIssuer) {
		t.Fatalf("another hub pinned: %v", err)
	}
}

// Issue 24 point 4: someone on the plain-HTTP path between a verifier and
// the hub keeps the status list from before a member's removal and
// serves it again afterwards. The list had no validUntil, so the removed
// member's credential verified for good. Now the replayed copy is
// accepted only within the hub's status list validity
// (groups.statusListValidity) and refused from then on; the agent's own
// clock (VerifyMembershipAt) decides, no waiting.
func TestVerifyMembershipRefusesAReplayedStatusList(t *testing.T) {
	var (
		hubURL   atomic.Pointer[string]
		replay   atomic.Bool
		captured atomic.Pointer[[]byte]
	)
	// The man in the middle: proxies to the hub, keeping the last list,
	// until it replays that copy.
	mitm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if replay.Load() {
			w.Write(*captured.Load())
			return
		}
		resp, err := http.Get(*hubURL.Load() + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		captured.Store(&b)
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
	}))
	defer mitm.Close()
	h := &testHub{t: t, log: testLogger(t), link: "mqtt"}
	h.Hub = hubtest.StartIn(t, t.TempDir(), func(c *app.Config) {
		c.MQTT.Addr, c.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
		c.Groups.StatusListURL = mitm.URL + lmos.StatusListPath
	})
	h.reg, h.addr, h.httpAddr = h.Main.Registry, h.MQTTAddr(), h.Main.HTTPAddr.String()
	u := "http://" + h.httpAddr
	hubURL.Store(&u)

	const idA, idB = "urn:example:replay-a", "urn:example:replay-b"
	a, b := h.connect(idA, nil), h.connect(idB, nil)
	ctx := ctxT(t, 10*time.Second)
	if _, err := h.reg.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{idA, idB}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "both credentials", func() bool { return a.Credentials()["g"] != nil && b.Credentials()["g"] != nil })
	credA := a.Credentials()["g"]
	if _, err := b.VerifyMembership(ctx, credA); err != nil || captured.Load() == nil {
		t.Fatalf("through the proxy: %v", err)
	}
	replay.Store(true)
	if _, err := h.reg.RemoveMember(ctx, "g", idA); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := b.VerifyMembershipAt(ctx, credA, now); err != nil {
		t.Fatalf("the replayed list within its validity (the bound the hub promises): %v", err)
	}
	if _, err := b.VerifyMembershipAt(ctx, credA, now.Add(hub.DefaultStatusListValidity)); !errors.Is(err, vc.ErrStatusList) {
		t.Fatalf("the replayed list after its validity: %v, want ErrStatusList", err)
	}
	replay.Store(false)
	if _, err := b.VerifyMembership(ctx, credA); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("the hub's list: %v, want ErrRevoked", err)
	}
}
