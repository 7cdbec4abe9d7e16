package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"reflect"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// nothingStored fails t when id is registered, holds a credential or
// waits for approval.
func nothingStored(t *testing.T, s *gatedStore, r *hub.Registry, a *hub.Admission, id, when string) {
	t.Helper()
	if _, err := r.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("%s: the Thing is stored (%v)", when, err)
	}
	if _, err := s.CredentialHash(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("%s: a credential is stored (%v)", when, err)
	}
	if _, err := a.PendingTD(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("%s: a join is pending (%v)", when, err)
	}
}

// One call joins a Thing over MQTT: the credential it is issued is stored
// in the Thing's own commit, its holder updates and deregisters it (the
// credential goes in the same commit), and a join the door could not
// deliver is undone inside the hub.
func TestJoinOverMQTT(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0, 0)
	ctx := context.Background()
	join := func(holder bool, td []byte) (hub.JoinResult, error) {
		return a.Join(ctx, hub.JoinRequest{ID: "urn:j", Door: hub.SourceMQTT, Holder: holder, Deregister: td == nil, Addr: "10.0.0.1", TD: td})
	}
	before := s.commits.Load()
	res, err := join(false, testTD("urn:j", "J"))
	if err != nil || res.Status != lmos.JoinAccepted || !res.Created || res.Password == "" || !bytes.Equal(res.TD, testTD("urn:j", "J")) {
		t.Fatalf("new Thing: %+v %v", res, err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the join took %d commits, want 1", n)
	}
	if h, err := s.CredentialHash("urn:j"); err != nil || h != hub.HashToken(res.Password) {
		t.Fatalf("stored credential %q %v", h, err)
	}
	// Its holder updates it: no new credential.
	if res, err := join(true, testTD("urn:j", "J2")); err != nil || res.Status != lmos.JoinAccepted || res.Created || res.Password != "" {
		t.Fatalf("the holder's update: %+v %v", res, err)
	}
	// Anyone else is refused, and nothing changes.
	raw, _ := r.Raw("urn:j")
	if res, err := join(false, testTD("urn:j", "Thief")); hub.ErrorCode(err) != hub.EFORBIDDEN || res.Status != lmos.JoinRejected {
		t.Fatalf("a stranger: %+v %v", res, err)
	}
	if now, _ := r.Raw("urn:j"); !bytes.Equal(now, raw) {
		t.Errorf("a refused join changed the Thing: %s", now)
	}
	if res, err := join(true, nil); err != nil || res.Status != lmos.JoinDeleted {
		t.Fatalf("deregistration: %+v %v", res, err)
	}
	nothingStored(t, s, r, a, "urn:j", "after the deregistration")

	// Undo: the Thing and the credential its undelivered result carried.
	res, err = join(false, testTD("urn:j", "J"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Undo(ctx, hub.JoinResult{Status: lmos.JoinAccepted, ID: "urn:j"}); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Errorf("undoing a join that issued nothing: %v", err)
	}
	if _, err := r.Get("urn:j"); err != nil {
		t.Fatalf("a refused undo removed the Thing: %v", err)
	}
	if err := a.Undo(ctx, res); err != nil {
		t.Fatal(err)
	}
	nothingStored(t, s, r, a, "urn:j", "after the undo")
}

// A refused join stores nothing: the join mode, an invalid description, a
// failed commit.
func TestJoinRefusedStoresNothing(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	closed := newAdmission(t, s, r, "closed", 0, 0)
	open := newAdmission(t, s, r, "open", 0, 0)
	for _, door := range []hub.Source{hub.SourceMQTT, hub.SourceWS, hub.SourceMDNS} {
		res, err := closed.Join(ctx, hub.JoinRequest{ID: "urn:r", Door: door, Addr: "10.0.0.2", TD: testTD("urn:r", "R")})
		if hub.ErrorCode(err) != hub.EFORBIDDEN || res.Status != lmos.JoinRejected || res.ID != "urn:r" {
			t.Errorf("closed, over %s: %+v %v", door, res, err)
		}
		nothingStored(t, s, r, closed, "urn:r", "closed over "+string(door))
		res, err = open.Join(ctx, hub.JoinRequest{ID: "urn:r", Door: door, Addr: "10.0.0.2", TD: []byte(`{"id":"urn:r"}`)})
		if hub.ErrorCode(err) != hub.EINVALID || res.Status != lmos.JoinRejected {
			t.Errorf("an invalid description over %s: %+v %v", door, res, err)
		}
		nothingStored(t, s, r, open, "urn:r", "invalid over "+string(door))
		s.fail.Store(true)
		res, err = open.Join(ctx, hub.JoinRequest{ID: "urn:r", Door: door, Addr: "10.0.0.2", TD: testTD("urn:r", "R")})
		s.fail.Store(false)
		if hub.ErrorCode(err) != hub.EINTERNAL || res.Status != lmos.JoinRejected || res.Password != "" {
			t.Errorf("a failed commit over %s: %+v %v", door, res, err)
		}
		nothingStored(t, s, r, open, "urn:r", "failed commit over "+string(door))
	}
}

// Under approve, Join parks a new Thing's join with its waiter; an MQTT
// waiter is issued its credential on approval, in the Thing's commit.
func TestJoinParksForApproval(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", 0, 0)
	ctx := context.Background()
	got := make(chan string, 1)
	w := &hub.JoinWaiter{Live: func() bool { return true }, Decided: func(pw string, err error) {
		if err != nil {
			pw = "error: " + err.Error()
		}
		got <- pw
	}}
	res, err := a.Join(ctx, hub.JoinRequest{ID: "urn:p", Door: hub.SourceMQTT, Addr: "10.0.0.3", TD: testTD("urn:p", "P"), Waiter: w})
	if err != nil || res.Status != lmos.JoinPending || !res.Approval || res.Password != "" {
		t.Fatalf("join under approve: %+v %v", res, err)
	}
	if _, err := r.Get("urn:p"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("a parked join registered the Thing: %v", err)
	}
	if err := a.Approve(ctx, "urn:p"); err != nil {
		t.Fatal(err)
	}
	pw := <-got
	if h, err := s.CredentialHash("urn:p"); err != nil || pw == "" || h != hub.HashToken(pw) {
		t.Fatalf("approved: password %q, stored %q %v", pw, h, err)
	}
	// mDNS: nobody waits; a description sent again is the same entry.
	for range 2 {
		res, err := a.Join(ctx, hub.JoinRequest{Door: hub.SourceMDNS, Addr: "10.0.0.4", TD: testTD("urn:m", "M")})
		if err != nil || res.Status != lmos.JoinPending || res.ID != "urn:m" {
			t.Fatalf("mDNS under approve: %+v %v", res, err)
		}
	}
	if n := a.PendingCount(); n != 1 {
		t.Errorf("%d joins pending, want 1", n)
	}
}

// The mDNS door: a Thing found is registered, announced again unchanged
// is not written, and a Thing registered by other means is not taken.
func TestJoinDiscovered(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0, 0)
	ctx := context.Background()
	req := hub.JoinRequest{Door: hub.SourceMDNS, Addr: "10.0.0.5", TD: testTD("urn:d", "D")}
	if res, err := a.Join(ctx, req); err != nil || res.Status != lmos.JoinAccepted || !res.Created || res.ID != "urn:d" || res.Password != "" {
		t.Fatalf("found: %+v %v", res, err)
	}
	before := s.commits.Load()
	if res, err := a.Join(ctx, req); err != nil || !res.Unchanged {
		t.Fatalf("announced again: %+v %v", res, err)
	}
	if n := s.commits.Load() - before; n != 0 {
		t.Errorf("an unchanged description took %d commits", n)
	}
	if _, err := r.Put(ctx, "urn:h", testTD("urn:h", "H"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	raw, _ := r.Raw("urn:h")
	if _, err := a.Join(ctx, hub.JoinRequest{Door: hub.SourceMDNS, Addr: "10.0.0.5", TD: testTD("urn:h", "Taken")}); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("a Thing registered over HTTP: %v", err)
	}
	if now, _ := r.Raw("urn:h"); !bytes.Equal(now, raw) {
		t.Errorf("the refused join changed it: %s", now)
	}
}

// A CBOR description is decoded once, by the hub, into the very document
// its stored JSON form parses to: integers, floats, big integers and byte
// strings as JSON writes them.
func TestJoinDecodesCBOROnce(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0, 0)
	var doc map[string]any
	if err := json.Unmarshal(testTD("urn:c", "C"), &doc); err != nil {
		t.Fatal(err)
	}
	// CBOR's negative integers reach -2^64, beyond int64.
	huge := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 64))
	doc["x-numbers"] = []any{uint64(1) << 63, int64(-7), 0.5, 1e21, huge, []byte{1, 2, 3}, nil, true}
	cb, err := cbor.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	req := hub.JoinRequest{ID: "urn:c", Door: hub.SourceMQTT, Addr: "10.0.0.6", TD: cb, ContentType: lmos.MediaCBOR}
	p, err := a.PrepareJoin(&req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := hub.ParseObject(p.Raw())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Doc(), want) {
		t.Fatalf("the document from CBOR\n%#v\ndiffers from its JSON form's\n%#v", p.Doc()["x-numbers"], want["x-numbers"])
	}
	res, err := a.Join(context.Background(), req)
	if err != nil || res.Status != lmos.JoinAccepted {
		t.Fatalf("%+v %v", res, err)
	}
	if stored, _ := r.Raw("urn:c"); !bytes.Equal(stored, p.Raw()) {
		t.Errorf("stored %s, want %s", stored, p.Raw())
	}
	// A door that decoded the description with its message (WebSocket)
	// passes that: it is not parsed again either.
	v, err := r.Decoder().DecodeValue(cb, lmos.MediaCBOR)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(v)
	ws := hub.JoinRequest{ID: "urn:c", Door: hub.SourceWS, Addr: "10.0.0.6", TD: raw, Doc: v.(map[string]any)}
	if p, err = a.PrepareJoin(&ws); err != nil || !reflect.DeepEqual(p.Doc(), want) {
		t.Fatalf("the document decoded by the door differs from its JSON form's (%v)", err)
	}
}

// Hostile and invalid CBOR descriptions are refused as invalid, and store
// nothing.
func TestJoinRefusesBadCBOR(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", -1, 0)
	bad := map[string][]byte{
		"nesting bomb":  append(bytes.Repeat([]byte{0x81}, 10000), 0x00),
		"huge map":      {0xba, 0x40, 0, 0, 0},
		"array":         {0x80},
		"int keys":      {0xa1, 0x01, 0x02},
		"tag":           {0xc1, 0x1a, 0, 0, 0, 1},
		"NaN":           {0xa1, 0x61, 'x', 0xf9, 0x7e, 0x00},
		"duplicate key": {0xa2, 0x61, 'x', 0x01, 0x61, 'x', 0x02},
		"truncated":     {0xa1, 0x61},
		"bad utf8":      {0xa1, 0x61, 0xff, 0x01},
	}
	for name, p := range bad {
		res, err := a.Join(context.Background(), hub.JoinRequest{ID: "urn:b", Door: hub.SourceMQTT, Addr: "10.0.0.7", TD: p, ContentType: lmos.MediaCBOR})
		if hub.ErrorCode(err) != hub.EINVALID || res.Status != lmos.JoinRejected {
			t.Errorf("%s: %+v %v, want invalid", name, res, err)
		}
	}
	nothingStored(t, s, r, a, "urn:b", "bad CBOR")
}

// Whatever CBOR the hub accepts as a description, it validated the
// document its stored JSON form parses to.
func FuzzPrepareJoinCBOR(f *testing.F) {
	var doc map[string]any
	_ = json.Unmarshal(testTD("urn:f", "F"), &doc)
	cb, _ := cbor.Marshal(doc)
	f.Add(cb)
	doc["n"] = []any{uint64(1) << 63, -1.5, []byte("x")}
	cb, _ = cbor.Marshal(doc)
	f.Add(cb)
	f.Add(append(bytes.Repeat([]byte{0x81}, 100), 0x00))
	db, err := store.Open(f.TempDir(), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	r, err := hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	a, err := hub.NewAdmission(r, nil, "open", -1, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		req := hub.JoinRequest{Door: hub.SourceMQTT, TD: payload, ContentType: lmos.MediaCBOR}
		p, err := a.PrepareJoin(&req)
		if err != nil {
			if c := hub.ErrorCode(err); c != hub.EINVALID && c != hub.ETOOLARGE {
				t.Fatalf("error code %q: %v", c, err)
			}
			return
		}
		want, err := hub.ParseObject(p.Raw())
		if err != nil || !reflect.DeepEqual(p.Doc(), want) {
			t.Fatalf("the document differs from its JSON form's (%v)", err)
		}
	})
}
