package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The group channel API over each link against a hub run as main runs it:
// members publish and receive (filters matched), a non-member is refused
// with a 403 problem, and a subscription comes back after a reconnect.
func TestGroupChannels(t *testing.T) {
	eachLink(t, func(t *testing.T, h *testHub) {
		ctx := ctxT(t, 20*time.Second)
		a := h.connect("urn:test:ga", nil)
		// B signs its description: over WebSocket only a registration
		// with its key's fresh proof is the member again after a
		// reconnect (an unsigned one could be anyone).
		_, keyB, _ := ed25519.GenerateKey(nil)
		b := h.connect("urn:test:gb", func(o *Options) { o.Key = keyB })
		c := h.connect("urn:test:gc", nil)
		if _, err := h.reg.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:test:ga", "urn:test:gb"}}); err != nil {
			t.Fatal(err)
		}
		got := make(chan GroupMessage, 64)
		_, err := b.GroupSubscribe(ctx, "g", "temp/+", func(m GroupMessage) { got <- m })
		if err != nil {
			t.Fatal(err)
		}
		next := func() GroupMessage {
			t.Helper()
			select {
			case m := <-got:
				return m
			case <-time.After(5 * time.Second):
				t.Fatal("no group message within 5s")
			}
			return GroupMessage{}
		}
		for _, topic := range []string{"lights", "temp/x"} { // lights: not for temp/+
			if err := a.GroupPublish(ctx, "g", topic, map[string]int{"n": 1}); err != nil {
				t.Fatal(err)
			}
		}
		m := next()
		var v struct{ N int }
		if m.Group != "g" || m.Topic != "temp/x" || m.Decode(&v) != nil || v.N != 1 {
			t.Fatalf("got %+v (%s)", m, m.Payload)
		}
		// A non-member is refused both ways (403).
		var p *Problem
		for what, err := range map[string]error{
			"publish":   c.GroupPublish(ctx, "g", "temp/x", 2),
			"subscribe": func() error { _, err := c.GroupSubscribe(ctx, "g", "#", func(GroupMessage) {}); return err }(),
		} {
			if !errors.As(err, &p) || p.Status != http.StatusForbidden {
				t.Errorf("a non-member's %s: %v, want a 403 problem", what, err)
			}
		}
		// After a reconnect the subscription is there again: publish until
		// one arrives (bounded).
		dropConnection(b)
		deadline := time.Now().Add(10 * time.Second)
		for n := 2; ; n++ {
			if time.Now().After(deadline) {
				t.Fatal("no group message after the reconnect")
			}
			_ = a.GroupPublish(ctx, "g", "temp/y", map[string]int{"n": n})
			select {
			case m := <-got:
				if m.Topic != "temp/y" {
					t.Fatalf("after the reconnect: %+v", m)
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// Bad group ids and topics are refused before anything is sent.
func TestGroupChannelArguments(t *testing.T) {
	h := startHub(t)
	a := h.connect("urn:test:args", nil)
	ctx := context.Background()
	for _, c := range []struct{ group, topic string }{{"", "x"}, {"a/b", "x"}, {"g", ""}, {"g", "a/#"}, {"g", "+"}} {
		if err := a.GroupPublish(ctx, c.group, c.topic, 1); err == nil {
			t.Errorf("GroupPublish(%q, %q) accepted", c.group, c.topic)
		}
	}
	if _, err := a.GroupSubscribe(ctx, "g+", "#", func(GroupMessage) {}); err == nil {
		t.Error("GroupSubscribe of a group id with a wildcard accepted")
	}
	for _, c := range []struct {
		filter, topic string
		want          bool
	}{{"#", "a/b", true}, {"a/+", "a/b", true}, {"a/+", "a/b/c", false}, {"a/#", "a", true}, {"a", "b", false}} {
		if lmos.MatchGroupFilter(c.filter, c.topic) != c.want {
			t.Errorf("lmos.MatchGroupFilter(%q, %q) != %v", c.filter, c.topic, c.want)
		}
	}
}
