package hub_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/mr-tron/base58"
)

// signedPut is one PUT of a signed description by a goroutine of its own.
type signedPut struct {
	id  string
	doc []byte
	did string
	bad bool // the document was changed after signing
	err error
}

// concurrentPuts signs n descriptions (each by a key of its own), spoils
// those whose index bad says, and PUTs them all at once while the
// verifier is held, so their signatures queue; then releases it and waits.
func concurrentPuts(t *testing.T, r *hub.Registry, n int, bad func(i int) bool) []*signedPut {
	t.Helper()
	now := time.Now()
	puts := make([]*signedPut, n)
	for i := range puts {
		key := newKey(t)
		id := fmt.Sprintf("urn:batch:%d", i)
		p := &signedPut{id: id, did: didOf(key), doc: signTD(t, testTD(id, "Lamp"), key, now)}
		if bad(i) {
			p.bad = true
			p.doc = editJSON(t, p.doc, func(m map[string]any) { m["title"] = "Not what was signed" })
		}
		puts[i] = p
	}
	waitQueued, release := hub.HoldVerifications(r)
	var wg sync.WaitGroup
	for _, p := range puts {
		wg.Go(func() {
			_, p.err = r.Put(context.Background(), p.id, p.doc, hub.Origin{Source: hub.SourceHTTP})
		})
	}
	waitQueued(n)
	release()
	wg.Wait()
	return puts
}

// checkPuts: every good description is stored and verified by its key,
// every bad one refused as a lone tampered one is (400, invalid
// signature) with nothing stored or bound.
func checkPuts(t *testing.T, r *hub.Registry, puts []*signedPut) {
	t.Helper()
	for _, p := range puts {
		th, getErr := r.Get(p.id)
		_, bindErr := r.Binding(p.id)
		if !p.bad {
			if p.err != nil {
				t.Errorf("%s (good): refused: %v", p.id, p.err)
				continue
			}
			if getErr != nil || th.Meta.Verified != p.did || bindErr != nil {
				t.Errorf("%s (good): stored %v, verified %q (want %q), binding %v", p.id, getErr, th.Meta.Verified, p.did, bindErr)
			}
			continue
		}
		if hub.ErrorCode(p.err) != hub.EINVALID || !errors.Is(p.err, proof.ErrInvalidSignature) {
			t.Errorf("%s (bad): %v, want EINVALID with an invalid signature", p.id, p.err)
		}
		if getErr == nil || bindErr == nil {
			t.Errorf("%s (bad): stored (%v) or bound (%v)", p.id, getErr, bindErr)
		}
	}
}

// Concurrent signed PUTs, good and tampered, checked as one batch: the
// batch fails, each is checked alone, and exactly the tampered ones are
// refused. With one bad among many (the fallback must not refuse the
// rest) and with several.
func TestConcurrentProofsBatchedExactlyBadRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		bad  func(i int) bool
	}{
		{"one bad of 24", 24, func(i int) bool { return i == 13 }},
		{"every third bad of 24", 24, func(i int) bool { return i%3 == 0 }},
		{"all good, 40", 40, func(int) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t, openStore(t), hub.RegistryOptions{Security: hub.SecurityOptions{RequireSigned: true}})
			puts := concurrentPuts(t, r, tc.n, tc.bad)
			checkPuts(t, r, puts)
			anyBad := false
			for i := range tc.n {
				anyBad = anyBad || tc.bad(i)
			}
			st := r.VerifyStats()
			// The held checks form one batch (16–31 or 32–63 by size).
			want := hub.VerifyStats{Checks: uint64(tc.n), Batches: 1, Batched: uint64(tc.n)}
			if tc.n < 32 {
				want.Sizes[4] = 1
			} else {
				want.Sizes[5] = 1
			}
			if anyBad {
				want.Failed = 1
			}
			if st != want {
				t.Errorf("stats %+v, want %+v", st, want)
			}
		})
	}
}

// A lone verification is checked alone, at once: no batch, nothing
// waits. A description refused by the per-source verify limit is refused
// before its signature is queued or checked.
func TestLoneVerification(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Security: hub.SecurityOptions{VerifyRate: 1, VerifyBurst: 2}})
	key := newKey(t)
	good := signTD(t, testTD("urn:lone:1", "Lamp"), key, time.Now())
	if _, err := r.Put(context.Background(), "urn:lone:1", good, hub.Origin{Source: hub.SourceHTTP, Addr: "10.0.0.1:1"}); err != nil {
		t.Fatalf("a lone signed PUT: %v", err)
	}
	bad := editJSON(t, signTD(t, testTD("urn:lone:2", "Lamp"), key, time.Now()), func(m map[string]any) { m["title"] = "X" })
	_, err := r.Put(context.Background(), "urn:lone:2", bad, hub.Origin{Source: hub.SourceHTTP, Addr: "10.0.0.1:1"})
	if hub.ErrorCode(err) != hub.EINVALID || !errors.Is(err, proof.ErrInvalidSignature) {
		t.Errorf("a lone tampered PUT: %v", err)
	}
	if _, err := r.Get("urn:lone:2"); err == nil {
		t.Error("the tampered description was stored")
	}
	_, err = r.Put(context.Background(), "urn:lone:3", signTD(t, testTD("urn:lone:3", "Lamp"), key, time.Now()), hub.Origin{Source: hub.SourceHTTP, Addr: "10.0.0.1:1"})
	if hub.ErrorCode(err) != hub.ERATELIMIT {
		t.Errorf("over the verify budget: %v", err)
	}
	want := hub.VerifyStats{Checks: 2}
	want.Sizes[0] = 2
	if st := r.VerifyStats(); st != want {
		t.Errorf("stats %+v, want %+v (two lone checks, the limited one not checked)", st, want)
	}
}

// The queue is bounded: with MaxSigQueue checks waiting, one more is
// checked alone at once, right or wrong, and counted.
func TestVerifyQueueBounded(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	pub, priv, _ := ed25519.GenerateKey(nil)
	msg := []byte("m")
	sig := ed25519.Sign(priv, msg)
	waitQueued, release := hub.HoldVerifications(r)
	var wg sync.WaitGroup
	results := make([]bool, hub.MaxSigQueue)
	for i := range results {
		wg.Go(func() { results[i] = hub.CheckSignature(r, pub, msg, sig) })
	}
	waitQueued(hub.MaxSigQueue)
	if !hub.CheckSignature(r, pub, msg, sig) {
		t.Error("a good signature past the queue refused")
	}
	if hub.CheckSignature(r, pub, []byte("n"), sig) {
		t.Error("a bad signature past the queue accepted")
	}
	if st := r.VerifyStats(); st.Overflow != 2 || st.Checks != 2 {
		t.Errorf("stats while held %+v, want 2 overflow checks", st)
	}
	release()
	wg.Wait()
	for i, ok := range results {
		if !ok {
			t.Fatalf("queued check %d refused", i)
		}
	}
	st := r.VerifyStats()
	if st.Checks != hub.MaxSigQueue+2 || st.Batches != hub.MaxSigQueue/64 || st.Sizes[6] != hub.MaxSigQueue/64 {
		t.Errorf("stats %+v, want the queue checked in batches of 64", st)
	}
}

// The write loop checks a patched description's signature alone: with
// other writers' checks held in a batch, a PATCH (verified in the loop)
// still gets its answer, and the loop keeps committing.
func TestWriteLoopDoesNotWaitForABatch(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	key := newKey(t)
	if _, err := r.Put(context.Background(), "urn:loop:1", signTD(t, testTD("urn:loop:1", "Lamp"), key, time.Now()), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	waitQueued, release := hub.HoldVerifications(r)
	held := make(chan error, 1)
	go func() {
		_, err := r.Put(context.Background(), "urn:loop:2", signTD(t, testTD("urn:loop:2", "Lamp"), newKey(t), time.Now()), hub.Origin{Source: hub.SourceHTTP})
		held <- err
	}()
	waitQueued(1)
	// A deadline only to turn a stuck loop into a failure, not a measure.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.Patch(ctx, "urn:loop:1", []byte(`{"title":"Changed under the proof"}`))
	if hub.ErrorCode(err) != hub.EINVALID || !errors.Is(err, proof.ErrInvalidSignature) {
		t.Errorf("a patch the old proof does not cover, while a batch is held: %v", err)
	}
	if _, err := r.Put(ctx, "urn:loop:3", testTD("urn:loop:3", "Plain"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Errorf("an unsigned write after it: %v", err)
	}
	release()
	if err := <-held; err != nil {
		t.Errorf("the held signed PUT: %v", err)
	}
}

// A did:key whose public key is a point of small order has no secret:
// under ZIP-215 one forged signature (R = identity, s = 0) fits every
// document. The hub refuses such a proof as malformed and binds nothing;
// an admin cannot bind an id to such a DID either.
func TestSmallOrderKeyCannotBind(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	torsion, _ := hex.DecodeString("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05") // order 8
	forged := make([]byte, 64)
	forged[0] = 1
	doc := editJSON(t, signTD(t, testTD("urn:weak:1", "Anyone's"), newKey(t), time.Now()), func(m map[string]any) {
		p := m["proof"].(map[string]any)
		p["verificationMethod"] = proof.VerificationMethod(torsion)
		p["proofValue"] = "z" + base58.Encode(forged)
	})
	_, err := r.Put(context.Background(), "urn:weak:1", doc, hub.Origin{Source: hub.SourceHTTP})
	if hub.ErrorCode(err) != hub.EINVALID || !errors.Is(err, proof.ErrMalformed) {
		t.Errorf("a proof by a small-order key: %v, want 400 malformed", err)
	}
	if _, err := r.Get("urn:weak:1"); err == nil {
		t.Error("stored")
	}
	if _, err := r.Binding("urn:weak:1"); err == nil {
		t.Error("bound")
	}
	if _, err := r.Rebind(context.Background(), "urn:weak:2", proof.DID(torsion)); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("an admin binding an id to a small-order DID: %v, want 400", err)
	}
}
