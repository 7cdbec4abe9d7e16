package mqtt

import (
	"sync"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// groupInbox collects what a group subscription is given.
type groupInbox struct {
	mu    sync.Mutex
	msgs  []hub.GroupMessage
	ended int
}

func (in *groupInbox) sub(gid, filter, member string) hub.GroupSubscription {
	return hub.GroupSubscription{Group: gid, Filter: filter, Member: member,
		Deliver: func(m hub.GroupMessage) { in.mu.Lock(); in.msgs = append(in.msgs, m); in.mu.Unlock() },
		Ended:   func() { in.mu.Lock(); in.ended++; in.mu.Unlock() }}
}

func (in *groupInbox) topics() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for _, m := range in.msgs {
		out = append(out, m.Topic)
	}
	return out
}

func (in *groupInbox) endedCount() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ended
}

// The broker's group bus on its own: members publish and subscribe
// (filters matched, content type kept), non-members and bad topics are
// refused and deliver nothing, and a removal ends the member's
// subscriptions before RemoveMember returns.
func TestGroupBus(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	for _, id := range []string{"urn:a", "urn:b", "urn:c"} {
		if _, err := e.reg.Put(ctx, id, tdgen.MakeTD(id, id), hub.Origin{Source: hub.SourceHTTP}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.reg.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a", "urn:b"}}); err != nil {
		t.Fatal(err)
	}
	bus, err := NewGroupBus(e.b)
	if err != nil {
		t.Fatal(err)
	}
	var a, b, c groupInbox
	stopA, err := bus.SubscribeGroup(a.sub("g", "#", "urn:a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.SubscribeGroup(b.sub("g", "temp/+", "urn:b")); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.SubscribeGroup(c.sub("g", "#", "urn:c")); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("a non-member's subscription: %v", err)
	}
	memberA := hub.ThingPrincipal("urn:a", "", false)
	for _, tc := range []struct {
		gid, topic string
		from       hub.Principal
		code       string
	}{
		{"g", "x", hub.ThingPrincipal("urn:c", "", true), hub.EFORBIDDEN},
		{"g", "x", hub.AnonymousFrom(""), hub.EUNAUTHORIZED},
		{"g", "x", hub.TokenPrincipal(hub.Token{ID: "admin"}, ""), hub.EFORBIDDEN},
		{"other", "x", memberA, hub.EFORBIDDEN},
		{"g", "a/#", memberA, hub.EINVALID},
		{"g/h", "x", memberA, hub.EINVALID},
	} {
		if err := bus.PublishGroup(tc.gid, tc.topic, []byte("1"), "application/json", tc.from); hub.ErrorCode(err) != tc.code {
			t.Errorf("publish %s %s as %s: %v, want %s", tc.gid, tc.topic, tc.from, err, tc.code)
		}
	}
	for _, topic := range []string{"temp/living", "lights"} {
		if err := bus.PublishGroup("g", topic, []byte(`{"on":true}`), "application/json", memberA); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.topics(); len(got) != 2 || got[0] != "lmos/v1/groups/g/temp/living" || got[1] != "lmos/v1/groups/g/lights" {
		t.Fatalf("a got %v", got)
	}
	if got := b.topics(); len(got) != 1 || got[0] != "lmos/v1/groups/g/temp/living" || b.msgs[0].ContentType != "application/json" || string(b.msgs[0].Payload) != `{"on":true}` {
		t.Fatalf("b got %v %+v", got, b.msgs)
	}
	if len(c.topics()) != 0 {
		t.Fatalf("a refused subscription got %v", c.topics())
	}
	// The removal ends b's subscription before RemoveMember returns.
	if _, err := e.reg.RemoveMember(ctx, "g", "urn:b"); err != nil {
		t.Fatal(err)
	}
	if b.endedCount() != 1 || a.endedCount() != 0 {
		t.Fatalf("ended: a %d, b %d; want 0, 1", a.endedCount(), b.endedCount())
	}
	if err := bus.PublishGroup("g", "temp/bed", []byte("2"), "application/json", memberA); err != nil {
		t.Fatal(err)
	}
	if got := b.topics(); len(got) != 1 {
		t.Fatalf("b got %v after its removal", got)
	}
	if err := bus.PublishGroup("g", "temp/bed", []byte("3"), "", hub.ThingPrincipal("urn:b", "", false)); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("a removed member publishes: %v", err)
	}
	// Cancelled: nothing more.
	stopA()
	if err := e.reg.DissolveGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if got := a.topics(); len(got) != 3 || a.endedCount() != 0 {
		t.Fatalf("a after its cancel: %v, ended %d", got, a.endedCount())
	}
	if d, r := bus.Counts(); d != 4 || r != 0 {
		t.Errorf("counts: delivered %d, refused %d; want 4, 0", d, r)
	}
}
