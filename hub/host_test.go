package hub_test

import (
	"context"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The exact host a Thing was written from is stored apart from its /64
// source: an anonymous write sets both, an authenticated one (its
// credential holder, an admin) keeps both, across a restart; the quota
// per source still counts the whole /64, and neither is shown in the
// served description.
func TestThingKeepsItsExactHost(t *testing.T) {
	ctx := context.Background()
	o := openReopenable(t, hub.RegistryOptions{MaxThingsPerSource: 1})
	const id = "urn:test:v6-host"
	if _, err := o.r.Put(ctx, id, testTD(id, "a"), hub.Origin{Source: hub.SourceMQTT, Addr: "fd00:24::a"}); err != nil {
		t.Fatal(err)
	}
	want := func(when, host string) {
		t.Helper()
		th, err := o.r.Get(id)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if th.Meta.Anon != "fd00:24::/64" || th.Meta.Host != host {
			t.Errorf("%s: source %q host %q, want fd00:24::/64 and %q", when, th.Meta.Anon, th.Meta.Host, host)
		}
	}
	want("written", "fd00:24::a")
	// Another host of the /64 counts against the same quota.
	if _, err := o.r.Put(ctx, "urn:test:v6-other", testTD("urn:test:v6-other", "b"), hub.Origin{Source: hub.SourceMQTT, Addr: "fd00:24::b"}); hub.RefusalReason(err) != "registry.maxThingsPerSource" {
		t.Errorf("a second Thing from the /64: %v, want registry.maxThingsPerSource", err)
	}
	if _, err := o.r.Put(ctx, id, testTD(id, "by its holder"), hub.Origin{Source: hub.SourceMQTT, Owner: true}); err != nil {
		t.Fatal(err)
	}
	want("after its credential holder's update", "fd00:24::a")
	if _, err := o.r.Put(ctx, id, testTD(id, "by an admin"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	want("after an admin's update", "fd00:24::a")
	if err := o.r.SetPresence(ctx, id, hub.PresenceOnline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	o.restart()
	want("after a restart", "fd00:24::a")
	// The host's own anonymous write from another address of the /64
	// (a new privacy address) moves it.
	if _, err := o.r.Put(ctx, id, testTD(id, "moved"), hub.Origin{Source: hub.SourceMQTT, Addr: "fd00:24::c"}); err != nil {
		t.Fatal(err)
	}
	want("written from another address", "fd00:24::c")
	raw, _, _, err := o.r.EnrichedTagged(id)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(raw); strings.Contains(s, "fd00") {
		t.Errorf("the served description shows an address: %s", s)
	}
}

// A door that knows only the /64 (HTTP and WebSocket name their clients by
// it) leaves the host unknown: a write from it is another writer's, so the
// host before it is not kept either.
func TestWriteFromASourceOnlyLeavesNoHost(t *testing.T) {
	ctx := context.Background()
	o := openReopenable(t, hub.RegistryOptions{})
	const id = "urn:test:v6-source"
	if _, err := o.r.Put(ctx, id, testTD(id, "a"), hub.Origin{Source: hub.SourceMQTT, Addr: "fd00:24::a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.r.Put(ctx, id, testTD(id, "b"), hub.Origin{Source: hub.SourceWS, Addr: "fd00:24::/64"}); err != nil {
		t.Fatal(err)
	}
	th, err := o.r.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if th.Meta.Anon != "fd00:24::/64" || th.Meta.Host != "" || th.Meta.WrittenFrom("fd00:24::a") {
		t.Errorf("source %q host %q, want fd00:24::/64 and none", th.Meta.Anon, th.Meta.Host)
	}
}
