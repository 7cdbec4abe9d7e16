package mqtt

import (
	"log/slog"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// onReply runs on the agent's connection goroutine: it never waits for the
// consumer. Intermediate results beyond the buffer are dropped and counted,
// the final one always has room, and replies after it are dropped.
func TestOnReplyNeverBlocks(t *testing.T) {
	b := &Broker{log: slog.New(slog.DiscardHandler)}
	b.replies.inbox = "lmos/v1/clients/inline/hub/r/"
	rt := &route{corr: []byte("c"), contentType: lmos.MediaJSON, ch: make(chan hub.Result, replyBuffer), final: make(chan hub.Result, 1)}
	b.replies.routes = map[string]*route{"k": rt}
	reply := func(status string, payload string) {
		pk := packets.Packet{TopicName: b.replies.inbox + "k", Payload: []byte(payload)}
		pk.Properties.CorrelationData = []byte("c")
		pk.Properties.User = []packets.UserProperty{{Key: statusProperty, Val: status}}
		b.onReply(nil, packets.Subscription{}, pk)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range replyBuffer + 10 {
			reply(hub.StatusRunning, `1`)
		}
		reply(hub.StatusCompleted, `2`)
		reply(hub.StatusCompleted, `3`) // after the final one
		reply(hub.StatusFailed, `{}`)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("onReply blocked on a consumer that does not read")
	}
	if n := rt.dropped.Load(); n != 10 {
		t.Errorf("dropped %d intermediate results, want 10", n)
	}
	if len(rt.ch) != replyBuffer || len(rt.final) != 1 {
		t.Fatalf("queued %d intermediate, %d final", len(rt.ch), len(rt.final))
	}
	if res := <-rt.final; res.Status != hub.StatusCompleted || string(res.Data) != `2` {
		t.Errorf("final %+v", res)
	}
	// Wrong inbox or correlation: dropped.
	pk := packets.Packet{TopicName: "lmos/v1/clients/inline/r/k", Payload: []byte(`1`)}
	pk.Properties.CorrelationData = []byte("c")
	b.onReply(nil, packets.Subscription{}, pk)
	if len(rt.final) != 0 {
		t.Error("a reply outside the inbox was routed")
	}
}
