package hub_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

const remoteHub = "http://remote.example:8080"

var bg = context.Background()

// served is td as a remote lmos-hub serves it: enriched, with its
// presence and origin.
func served(t *testing.T, td []byte, presence string) []byte {
	t.Helper()
	return editJSON(t, td, func(m map[string]any) {
		m["registration"] = map[string]any{"created": "2026-01-01T00:00:00Z", "modified": "2026-01-01T00:00:00Z"}
		m["lmos:presence"] = map[string]any{"status": presence, "since": "2026-01-01T00:00:00Z", "via": "mqtt"}
		m["lmos:origin"] = map[string]any{"source": "mqtt"}
	})
}

// mirrorRefused checks that err has code and a message containing each of
// want, and that the registry did not change: no new event, the Thing's
// state as before.
func mirrorRefused(t *testing.T, r *hub.Registry, what string, err error, code string, rev uint64, id string, before state, want ...string) {
	t.Helper()
	if hub.ErrorCode(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: message %q does not say %q", what, err, w)
		}
	}
	if got := r.Revision(); got != rev {
		t.Fatalf("%s: revision %d, want %d (something was stored)", what, got, rev)
	}
	if got := stateOf(t, r, id); got != before {
		t.Fatalf("%s: state changed: %+v, was %+v", what, got, before)
	}
}

func TestMirrorStoresARemoteCopy(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	td := testTD("urn:m:1", "Lamp")
	created, err := r.Mirror(bg, "urn:m:1", served(t, td, "online"), remoteHub)
	if err != nil || !created {
		t.Fatalf("mirror: %v %v", created, err)
	}
	th, err := r.Get("urn:m:1")
	if err != nil {
		t.Fatal(err)
	}
	if th.Meta.Origin != (hub.Origin{Source: hub.SourceRemote, Hub: remoteHub}) || !th.IsMirror() {
		t.Fatalf("origin %+v", th.Meta.Origin)
	}
	if p := th.Meta.Presence; p.Status != hub.PresenceOnline || p.Via != hub.SourceRemote {
		t.Fatalf("presence %+v, want the remote's (online, via remote)", p)
	}
	// The stored document is the remote's without its enrichment.
	doc, _ := r.Document("urn:m:1")
	for _, m := range []string{"registration", "lmos:presence", "lmos:origin"} {
		if _, ok := doc[m]; ok {
			t.Fatalf("stored mirror keeps the remote's %s: %v", m, doc)
		}
	}
	enriched, _, _, err := r.EnrichedTagged("urn:m:1")
	if err != nil || !strings.Contains(string(enriched), `"lmos:origin":{"source":"remote","hub":"`+remoteHub+`"}`) {
		t.Fatalf("served mirror %s: %v", enriched, err)
	}
	// The same copy again (a poll, a resync) is no change; a new presence
	// changes only the presence.
	rev := r.Revision()
	if created, err := r.Mirror(bg, "urn:m:1", served(t, td, "online"), remoteHub); err != nil || created || r.Revision() != rev {
		t.Fatalf("same copy: %v %v, revision %d → %d", created, err, rev, r.Revision())
	}
	if _, err := r.Mirror(bg, "urn:m:1", served(t, td, "offline"), remoteHub); err != nil || r.Revision() != rev {
		t.Fatalf("presence only: %v, revision %d → %d", err, rev, r.Revision())
	}
	if th, _ := r.Get("urn:m:1"); th.Meta.Presence.Status != hub.PresenceOffline {
		t.Fatalf("presence %+v, want offline", th.Meta.Presence)
	}
	// A changed copy is an update; an unknown presence is unknown.
	if created, err := r.Mirror(bg, "urn:m:1", testTD("urn:m:1", "Lamp 2"), remoteHub); err != nil || created || r.Revision() != rev+1 {
		t.Fatalf("update: %v %v", created, err)
	}
	if th, _ := r.Get("urn:m:1"); th.Meta.Presence.Status != hub.PresenceUnknown || th.Summary == nil {
		t.Fatalf("presence %+v, want unknown", th.Meta.Presence)
	}
	// The remote's expiry is kept.
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	withExp := editJSON(t, testTD("urn:m:2", "Fan"), func(m map[string]any) {
		m["registration"] = map[string]any{"expires": exp.Format(time.RFC3339)}
	})
	if _, err := r.Mirror(bg, "urn:m:2", withExp, remoteHub); err != nil {
		t.Fatal(err)
	}
	if th, _ := r.Get("urn:m:2"); !th.Meta.Expires.Equal(exp) {
		t.Fatalf("expires %v, want %v", th.Meta.Expires, exp)
	}
	if got := r.MirroredFrom(remoteHub); !slices.Equal(got, []string{"urn:m:1", "urn:m:2"}) {
		t.Fatalf("MirroredFrom = %v", got)
	}
	if got := r.MirroredFrom("http://other"); len(got) != 0 {
		t.Fatalf("MirroredFrom(other) = %v", got)
	}
}

// Every malformed copy is refused as any write would be, and nothing is
// stored.
func TestMirrorValidatesLikeAnyWrite(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{MaxTDBytes: 4 << 10})
	none := stateOf(t, r, "urn:m:v")
	for _, c := range []struct {
		name, id, from string
		raw            []byte
		code, msg      string
	}{
		{"no from", "urn:m:v", "", testTD("urn:m:v", "V"), hub.EINVALID, "directory it comes from"},
		{"other id", "urn:m:v", remoteHub, testTD("urn:m:w", "V"), hub.EINVALID, "id it is listed under"},
		{"not a TD", "urn:m:v", remoteHub, []byte(`{"id":"urn:m:v"}`), hub.EINVALID, ""},
		{"not an object", "urn:m:v", remoteHub, []byte(`[1]`), hub.EINVALID, "JSON object"},
		{"too large", "urn:m:v", remoteHub, testTD("urn:m:v", strings.Repeat("x", 5<<10)), hub.ETOOLARGE, "registry.maxTDBytes"},
		{"bad id", "no id", remoteHub, testTD("no id", "V"), hub.EINVALID, ""},
		{"expired", "urn:m:v", remoteHub, editJSON(t, testTD("urn:m:v", "V"), func(m map[string]any) {
			m["registration"] = map[string]any{"expires": "2001-01-01T00:00:00Z"}
		}), hub.EINVALID, "already expired"},
		{"bad proof", "urn:m:v", remoteHub, editProof(t, signTD(t, testTD("urn:m:v", "V"), newKey(t), time.Now()), func(p map[string]any) {
			p["proofValue"] = "z3FXQjecWufY46yg5abdVZsXqLhxhueuSoZgNSARiKBk9czhSePTFehP8c3PGfb6a22gkfUKKiS4aMHmvfnm8XkD"
		}), hub.EINVALID, "signature"},
	} {
		_, err := r.Mirror(bg, c.id, c.raw, c.from)
		mirrorRefused(t, r, c.name, err, c.code, 0, "urn:m:v", none, c.msg)
	}
}

// A copy never replaces a Thing online here, nor a local one without the
// proof of its id's bound key; it never overrides a key binding.
func TestMirrorNeverTakesALocalThingOrAKeyBinding(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	key, other := newKey(t), newKey(t)
	t0 := time.Now().Add(-time.Hour)
	// urn:l:on: local, online. urn:l:off: local, unsigned, offline.
	// urn:l:bound: local, bound to key, offline.
	for _, id := range []string{"urn:l:on", "urn:l:off"} {
		if _, err := r.Put(bg, id, testTD(id, "L"), hub.Origin{Source: hub.SourceMQTT}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Put(bg, "urn:l:bound", signTD(t, testTD("urn:l:bound", "B"), key, t0), hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatal(err)
	}
	_ = r.SetPresence(bg, "urn:l:on", hub.PresenceOnline, hub.SourceMQTT)
	_ = r.SetPresence(bg, "urn:l:off", hub.PresenceOffline, hub.SourceMQTT)
	_ = r.SetPresence(bg, "urn:l:bound", hub.PresenceOffline, hub.SourceMQTT)
	rev := r.Revision()

	try := func(name, id string, raw []byte, code string, want ...string) {
		t.Helper()
		before := stateOf(t, r, id)
		_, err := r.Mirror(bg, id, raw, remoteHub)
		mirrorRefused(t, r, name, err, code, rev, id, before, want...)
		if th, _ := r.Get(id); th.IsMirror() {
			t.Fatalf("%s: became a mirror", name)
		}
	}
	try("online local", "urn:l:on", testTD("urn:l:on", "R"), hub.ECONFLICT, "online here")
	try("online local, signed", "urn:l:on", signTD(t, testTD("urn:l:on", "R"), key, time.Now()), hub.ECONFLICT, "online here")
	try("offline local, no binding", "urn:l:off", testTD("urn:l:off", "R"), hub.ECONFLICT, "bound to a key")
	try("bound, unsigned copy", "urn:l:bound", testTD("urn:l:bound", "R"), hub.EFORBIDDEN, "bound here to "+didOf(key))
	try("bound, other key", "urn:l:bound", signTD(t, testTD("urn:l:bound", "R"), other, time.Now()), hub.EFORBIDDEN, "another key", didOf(other))
	try("bound, older proof", "urn:l:bound", signTD(t, testTD("urn:l:bound", "R"), key, t0.Add(-time.Minute)), hub.ECONFLICT, "before the description last accepted")
	// A bound id whose Thing is gone keeps its binding against copies.
	if err := r.Delete(bg, "urn:l:bound"); err != nil {
		t.Fatal(err)
	}
	rev = r.Revision()
	try("deleted bound, other key", "urn:l:bound", signTD(t, testTD("urn:l:bound", "R"), other, time.Now()), hub.EFORBIDDEN, "another key")

	// The bound key's proof: the agent moved to the remote, its copy
	// replaces the offline local Thing, and the binding stays.
	if _, err := r.Put(bg, "urn:l:bound", signTD(t, testTD("urn:l:bound", "B"), key, t0.Add(time.Minute)), hub.Origin{Source: hub.SourceMQTT, Owner: true}); err != nil {
		t.Fatal(err)
	}
	_ = r.SetPresence(bg, "urn:l:bound", hub.PresenceOffline, hub.SourceMQTT)
	rev = r.Revision()
	echo, _ := r.Raw("urn:l:bound")
	try("bound, the description accepted here come back", "urn:l:bound", served(t, echo, "online"), hub.ECONFLICT, "no newer than")
	moved := signTD(t, testTD("urn:l:bound", "Moved"), key, time.Now())
	if created, err := r.Mirror(bg, "urn:l:bound", served(t, moved, "online"), remoteHub); err != nil || created {
		t.Fatalf("moved agent's copy: %v %v", created, err)
	}
	th, _ := r.Get("urn:l:bound")
	if !th.IsMirror() || th.Meta.Verified != didOf(key) || th.Meta.Presence.Status != hub.PresenceOnline {
		t.Fatalf("moved: %+v", th.Meta)
	}
	if b, _ := r.Binding("urn:l:bound"); b.DID != didOf(key) {
		t.Fatalf("binding %+v", b)
	}
}

// A mirror is read-only through every door; only its Puller (Unmirror
// from its directory) deletes it, and only its own agent takes it back.
func TestMirrorIsReadOnly(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	key := newKey(t)
	if _, err := r.Mirror(bg, "urn:m:ro", signTD(t, testTD("urn:m:ro", "RO"), key, time.Now().Add(-time.Minute)), remoteHub); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mirror(bg, "urn:m:plain", testTD("urn:m:plain", "P"), remoteHub); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(bg, "urn:l:local", testTD("urn:l:local", "L"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	rev := r.Revision()
	before := stateOf(t, r, "urn:m:ro")
	admin := hub.Origin{Source: hub.SourceHTTP, Admin: true}
	_, err := r.Put(bg, "urn:m:ro", testTD("urn:m:ro", "X"), admin)
	mirrorRefused(t, r, "admin put", err, hub.EFORBIDDEN, rev, "urn:m:ro", before, "read-only mirror", remoteHub)
	err = r.Patch(bg, "urn:m:ro", []byte(`{"title":"X"}`))
	mirrorRefused(t, r, "patch", err, hub.EFORBIDDEN, rev, "urn:m:ro", before, "read-only mirror", remoteHub)
	err = r.Delete(bg, "urn:m:ro")
	mirrorRefused(t, r, "delete", err, hub.EFORBIDDEN, rev, "urn:m:ro", before, "read-only mirror", remoteHub)
	_, err = r.Put(bg, "urn:m:ro", signTD(t, testTD("urn:m:ro", "X"), newKey(t), time.Now()), hub.Origin{Source: hub.SourceWS})
	mirrorRefused(t, r, "other key", err, hub.EFORBIDDEN, rev, "urn:m:ro", before, "read-only mirror")
	_, err = r.Put(bg, "urn:m:plain", testTD("urn:m:plain", "X"), hub.Origin{Source: hub.SourceWS, Owner: true})
	mirrorRefused(t, r, "unsigned ws owner", err, hub.EFORBIDDEN, rev, "urn:m:plain", stateOf(t, r, "urn:m:plain"), "read-only mirror")
	// A local connection's presence does not touch a mirror's.
	if err := r.SetPresence(bg, "urn:m:ro", hub.PresenceOffline, hub.SourceMQTT); err != nil || stateOf(t, r, "urn:m:ro") != before {
		t.Fatalf("local presence on a mirror: %v", err)
	}
	if th, _ := r.Get("urn:m:ro"); th.Meta.Presence.Via != hub.SourceRemote {
		t.Fatalf("presence %+v", th.Meta.Presence)
	}
	// Unmirror: only from its own directory, only a mirror.
	err = r.Unmirror(bg, "urn:m:ro", "http://other.example")
	mirrorRefused(t, r, "unmirror from another", err, hub.ENOTFOUND, rev, "urn:m:ro", before, "mirrored from http://other.example")
	err = r.Unmirror(bg, "urn:l:local", remoteHub)
	mirrorRefused(t, r, "unmirror a local Thing", err, hub.ENOTFOUND, rev, "urn:l:local", stateOf(t, r, "urn:l:local"))
	if err := r.Unmirror(bg, "urn:m:plain", remoteHub); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("urn:m:plain"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("unmirrored: %v", err)
	}
	// Its own agent (the key its copy was verified by) takes it back.
	created, err := r.Put(bg, "urn:m:ro", signTD(t, testTD("urn:m:ro", "Back"), key, time.Now()), hub.Origin{Source: hub.SourceWS})
	if err != nil || created {
		t.Fatalf("own key: %v %v", created, err)
	}
	th, _ := r.Get("urn:m:ro")
	if th.IsMirror() || th.Meta.Origin.Source != hub.SourceWS || th.Meta.Verified != didOf(key) || th.Meta.Presence.Via == hub.SourceRemote {
		t.Fatalf("taken back: %+v", th.Meta)
	}
	// Now a local Thing: an admin may change it again.
	if _, err := r.Put(bg, "urn:m:ro", testTD("urn:m:ro", "Admin"), admin); err != nil {
		t.Fatal(err)
	}
}

// A copy from another directory does not replace a mirror that is online
// there, unless its proof is by the bound key; the first directory's
// Unmirror then leaves it alone.
func TestMirrorFromTwoDirectories(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	const other = "http://other.example"
	if _, err := r.Mirror(bg, "urn:m:two", served(t, testTD("urn:m:two", "A"), "online"), remoteHub); err != nil {
		t.Fatal(err)
	}
	rev, before := r.Revision(), stateOf(t, r, "urn:m:two")
	_, err := r.Mirror(bg, "urn:m:two", served(t, testTD("urn:m:two", "B"), "online"), other)
	mirrorRefused(t, r, "online elsewhere", err, hub.ECONFLICT, rev, "urn:m:two", before, "mirrored here from "+remoteHub)
	if _, err := r.Mirror(bg, "urn:m:two", served(t, testTD("urn:m:two", "A"), "offline"), remoteHub); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mirror(bg, "urn:m:two", served(t, testTD("urn:m:two", "B"), "online"), other); err != nil {
		t.Fatalf("moved on: %v", err)
	}
	if err := r.Unmirror(bg, "urn:m:two", remoteHub); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("unmirror from the first: %v", err)
	}
	if th, _ := r.Get("urn:m:two"); th.Meta.Origin.Hub != other {
		t.Fatalf("origin %+v", th.Meta.Origin)
	}
}

// The doors of joins: an MQTT or WebSocket join of a mirrored Thing is
// refused unless signed by its key (the agent moved here) or made by the
// holder of its MQTT credential.
func TestMirrorJoins(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0, 0)
	key := newKey(t)
	signed := signTD(t, testTD("urn:m:j", "J"), key, time.Now().Add(-time.Minute))
	if _, err := r.Mirror(bg, "urn:m:j", signed, remoteHub); err != nil {
		t.Fatal(err)
	}
	rev, before := r.Revision(), stateOf(t, r, "urn:m:j")
	for _, door := range []hub.Source{hub.SourceMQTT, hub.SourceWS} {
		_, err := a.Join(bg, hub.JoinRequest{ID: "urn:m:j", Door: door, Addr: "10.0.0.9", TD: testTD("urn:m:j", "X")})
		mirrorRefused(t, r, string(door)+" unsigned", err, hub.EFORBIDDEN, rev, "urn:m:j", before, "read-only mirror", remoteHub)
		_, err = a.Join(bg, hub.JoinRequest{ID: "urn:m:j", Door: door, Addr: "10.0.0.9", TD: signTD(t, testTD("urn:m:j", "X"), newKey(t), time.Now())})
		mirrorRefused(t, r, string(door)+" other key", err, hub.EFORBIDDEN, rev, "urn:m:j", before, "read-only mirror")
	}
	_, err := a.Join(bg, hub.JoinRequest{ID: "urn:m:j", Door: hub.SourceMQTT, Addr: "10.0.0.9", Deregister: true})
	mirrorRefused(t, r, "deregister", err, hub.EFORBIDDEN, rev, "urn:m:j", before, "read-only mirror")
	res, err := a.Join(bg, hub.JoinRequest{ID: "urn:m:j", Door: hub.SourceMQTT, Addr: "10.0.0.9", TD: signTD(t, testTD("urn:m:j", "Here"), key, time.Now())})
	if err != nil || res.Password == "" {
		t.Fatalf("own key over MQTT: %+v %v", res, err)
	}
	th, _ := r.Get("urn:m:j")
	if th.IsMirror() || th.Meta.Origin.Source != hub.SourceMQTT {
		t.Fatalf("after the join: %+v", th.Meta)
	}
	// The agent moves away again; its credential holder takes it back.
	if _, err := r.Mirror(bg, "urn:m:j", signTD(t, testTD("urn:m:j", "There"), key, time.Now().Add(time.Second)), remoteHub); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Join(bg, hub.JoinRequest{ID: "urn:m:j", Door: hub.SourceMQTT, Holder: true, TD: signTD(t, testTD("urn:m:j", "Back"), key, time.Now().Add(2*time.Second))}); err != nil {
		t.Fatalf("credential holder: %v", err)
	}
	if th, _ := r.Get("urn:m:j"); th.IsMirror() {
		t.Fatalf("still a mirror: %+v", th.Meta)
	}
}

var _ = json.Marshal
