package e2e

// Benchmarks of group channels over WebSocket (issue 15, chan): one
// message fanned out to 50 WebSocket members against the same fan-out of a
// Thing's event to 50 WebSocket consumers in the same run, and the time
// from a member's removal to its subscription's end. Figures and commands
// are in docs/PERFORMANCE.md.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// wsBenchMember registers Thing id on a new connection (it speaks for it).
func wsBenchMember(b *testing.B, url, id string) *websocket.Conn {
	b.Helper()
	c := wsBenchDial(b, url)
	if err := wsBenchSend(c, map[string]any{"messageType": "registerThing", "messageId": "r", "td": wsTD(id)}); err != nil {
		b.Fatal(err)
	}
	if r, err := wsBenchRead(c); err != nil || r["messageType"] != "acknowledgement" {
		b.Fatalf("register %s: %v %v", id, r, err)
	}
	return c
}

// benchFanout counts what conns receive and runs burst sends per
// iteration until each conn has them all.
func benchFanout(b *testing.B, conns []*websocket.Conn, burst int, send func(i int) error) {
	var got atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
				got.Add(1)
			}
		})
	}
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
		wg.Wait()
	}()
	n := int64(len(conns))
	var deliveries int64
	var elapsed time.Duration
	for b.Loop() {
		want := got.Load() + n*int64(burst)
		start := time.Now()
		for i := range burst {
			if err := send(i); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for got.Load() < want && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		elapsed += time.Since(start)
		deliveries += n * int64(burst)
		if got.Load() < want {
			b.Fatalf("%d of %d deliveries within 30 s", got.Load()-(want-n*int64(burst)), n*int64(burst))
		}
	}
	b.ReportMetric(float64(deliveries)/elapsed.Seconds(), "deliveries/s")
}

// BenchmarkGroupChannelWSFanout50: a member publishes 20 messages on a
// group channel and the benchmark waits until each of 50 WebSocket
// members has them all (group); the same with a WebSocket agent's event
// and 50 consumers subscribed to it (event), in the same run.
func BenchmarkGroupChannelWSFanout50(b *testing.B) {
	const members, burst = 50, 20
	raiseNoFile(b, 2*members+512)
	m, url, stop := startWSBenchHub(b)
	b.Cleanup(stop)
	b.Run("event", func(b *testing.B) {
		id := benchAgentID(50)
		agent := wsBenchAgent(b, url, id)
		defer agent.CloseNow()
		conns := make([]*websocket.Conn, members)
		for i := range conns {
			conns[i] = wsBenchDial(b, url)
			if err := wsBenchSend(conns[i], map[string]any{"messageType": "subscribeEvent", "messageId": "s", "thingId": id, "event": "alarm"}); err != nil {
				b.Fatal(err)
			}
			if r, err := wsBenchRead(conns[i]); err != nil || r["messageType"] != "acknowledgement" {
				b.Fatalf("subscribe: %v %v", r, err)
			}
		}
		benchFanout(b, conns, burst, func(i int) error {
			return wsBenchSend(agent, map[string]any{"messageType": "event", "messageId": uuid.NewString(), "thingId": id,
				"event": "alarm", "data": map[string]any{"i": i, "level": "warning"}})
		})
	})
	b.Run("group", func(b *testing.B) {
		// New Things each run: a socket speaks for a member Thing only when
		// its registration created it or proved it (PROTOCOL §7).
		base := 1000 * int(groupBenchRuns.Add(1))
		ids := make([]string, members+1)
		conns := make([]*websocket.Conn, members+1)
		for i := range ids {
			ids[i] = benchAgentID(base + i)
			conns[i] = wsBenchMember(b, url, ids[i])
		}
		gid := fmt.Sprintf("bench-%d", time.Now().UnixNano())
		if _, err := m.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: gid, Title: "Bench", Members: ids}); err != nil {
			b.Fatal(err)
		}
		pub, subs := conns[0], conns[1:]
		for _, c := range subs {
			// Each member's credential comes first, so that the fan-out
			// below counts group messages only.
			if r, err := wsBenchRead(c); err != nil || r["messageType"] != "groupCredential" {
				b.Fatalf("the member's credential: %v %v", r, err)
			}
			if err := wsBenchSend(c, map[string]any{"messageType": "subscribeGroup", "messageId": "s", "group": gid, "topic": "#"}); err != nil {
				b.Fatal(err)
			}
			if r, err := wsBenchRead(c); err != nil || r["messageType"] != "acknowledgement" {
				b.Fatalf("subscribeGroup: %v %v", r, err)
			}
		}
		// The publisher's acknowledgements are read and dropped.
		go func() {
			for {
				if _, _, err := pub.Read(context.Background()); err != nil {
					return
				}
			}
		}()
		defer pub.CloseNow()
		benchFanout(b, subs, burst, func(i int) error {
			return wsBenchSend(pub, map[string]any{"messageType": "publishGroup", "messageId": uuid.NewString(), "group": gid,
				"topic": "alarm", "data": map[string]any{"i": i, "level": "warning"}})
		})
	})
}

// BenchmarkGroupChannelWSRevocation: from the start of RemoveMember to the
// removed member's WebSocket receiving the end of its subscription (error
// 403); the removal is a durable commit.
func BenchmarkGroupChannelWSRevocation(b *testing.B) {
	m, url, stop := startWSBenchHub(b)
	b.Cleanup(stop)
	ctx := context.Background()
	id := benchAgentID(200)
	c := wsBenchMember(b, url, id)
	defer c.CloseNow()
	if _, err := m.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "revoke", Title: "Revoke"}); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	seq := 0
	for b.Loop() {
		if _, err := m.Registry.AddMember(ctx, "revoke", id); err != nil {
			b.Fatal(err)
		}
		seq++
		sid := fmt.Sprintf("s-%d", seq)
		if err := wsBenchSend(c, map[string]any{"messageType": "subscribeGroup", "messageId": sid, "group": "revoke", "topic": "#"}); err != nil {
			b.Fatal(err)
		}
		if r, err := wsBenchReadNoCredential(c); err != nil || r["messageType"] != "acknowledgement" {
			b.Fatalf("subscribeGroup: %v %v", r, err)
		}
		start := time.Now()
		if _, err := m.Registry.RemoveMember(ctx, "revoke", id); err != nil {
			b.Fatal(err)
		}
		r, err := wsBenchReadNoCredential(c)
		if err != nil || r["messageType"] != "error" || r["correlationId"] != sid {
			b.Fatalf("after the removal: %v %v", r, err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Millisecond, "ms")
}

// groupBenchRuns numbers the runs of the group fan-out benchmark.
var groupBenchRuns atomic.Int64

// wsBenchReadNoCredential reads the next message that is not a
// groupCredential: the member's credential arrives when it is added, and
// its end (a groupCredential without one) when it is removed, in no fixed
// order with the answers the benchmark waits for.
func wsBenchReadNoCredential(c *websocket.Conn) (map[string]any, error) {
	for {
		r, err := wsBenchRead(c)
		if err != nil || r["messageType"] != "groupCredential" {
			return r, err
		}
	}
}
