package e2e

// Benchmarks of the WebSocket gateway (issue 5): action round trips from a
// WebSocket consumer to an MQTT agent and to a WebSocket agent, one event
// fanned out to 1,000 WebSocket subscribers, and the RSS of the real
// binary per idle WebSocket connection. Figures and commands are in
// docs/PERFORMANCE.md.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"
	"github.com/fxamacker/cbor/v2"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// startWSBenchHub is startBenchHub without the per-connection message rate
// limit, which would otherwise pace a benchmark's consumer.
func startWSBenchHub(b *testing.B) (*Main, string, func()) {
	b.Helper()
	m, _, stop := startBenchHub(b, b.TempDir(), func(cfg *Config) {
		cfg.HTTP.WebSocket.MessageRate = 1e9
		cfg.HTTP.WebSocket.MessageBurst = 1 << 30
	})
	return m, "ws://" + m.HTTPAddr.String() + "/ws", stop
}

func wsBenchDial(b *testing.B, url string) *websocket.Conn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"lmosprotocol"}})
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	return c
}

func wsBenchSend(c *websocket.Conn, m map[string]any) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, data)
}

// wsBenchRead reads one message within 10 s (coder/websocket closes the
// connection when a read's context ends).
func wsBenchRead(c *websocket.Conn) (map[string]any, error) {
	return wsBenchReadCtx(c, 10*time.Second)
}

func wsBenchReadCtx(c *websocket.Conn, d time.Duration) (map[string]any, error) {
	ctx, cancel := context.Background(), func() {}
	if d > 0 {
		ctx, cancel = context.WithTimeout(ctx, d)
	}
	defer cancel()
	_, data, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

// wsBenchAgent registers a WebSocket agent with an echo action and serves
// it until the connection closes.
func wsBenchAgent(b *testing.B, url, id string) *websocket.Conn {
	b.Helper()
	c := wsBenchDial(b, url)
	td := wsTD(id)
	td["actions"].(map[string]any)["echo"] = map[string]any{"forms": []any{map[string]any{"href": "ws://hub/ws"}}}
	if err := wsBenchSend(c, map[string]any{"messageType": "registerThing", "messageId": "r", "td": td}); err != nil {
		b.Fatal(err)
	}
	if r, err := wsBenchRead(c); err != nil || r["messageType"] != "acknowledgement" {
		b.Fatalf("register: %v %v", r, err)
	}
	go func() {
		for {
			m, err := wsBenchReadCtx(c, 0) // the agent waits for requests as long as it lives
			if err != nil {
				return
			}
			if m["messageType"] != "invokeAction" {
				continue
			}
			_ = wsBenchSend(c, map[string]any{"messageType": "actionStatus", "messageId": uuid.NewString(), "thingId": id,
				"correlationId": m["messageId"], "action": m["action"], "status": "completed",
				"output": map[string]any{"echo": m["input"], "agent": id}})
		}
	}()
	return c
}

// BenchmarkWSActionRoundTrip: a WebSocket consumer invokes an echo action
// (JSON text frames) and waits for the completed actionStatus; the agent is
// a CBOR MQTT 5 agent (the hub transcodes) or a WebSocket agent.
func BenchmarkWSActionRoundTrip(b *testing.B) {
	m, url, stop := startWSBenchHub(b)
	b.Cleanup(stop)
	mqttID, wsID := benchAgentID(1), benchAgentID(2)
	// The MQTT agent, as in BenchmarkMQTTActionRoundTrip100Agents.
	cr := joinThings(b, m.MQTTAddr.String(), []string{mqttID})[0]
	ready := make(chan struct{})
	var agent *paho.Client
	agent = benchMQTT(b, m.MQTTAddr.String(), thingConnect(cr), func(p *paho.Publish) {
		<-ready
		var in any
		_ = cbor.Unmarshal(p.Payload, &in)
		out, _ := cbor.Marshal(map[string]any{"echo": in, "agent": mqttID})
		props := &paho.PublishProperties{CorrelationData: p.Properties.CorrelationData, ContentType: "application/cbor"}
		props.User.Add("lmos-status", "completed")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = agent.Publish(ctx, &paho.Publish{Topic: p.Properties.ResponseTopic, QoS: p.QoS, Payload: out, Properties: props})
	})
	benchSubscribe(b, agent, "lmos/v1/things/"+cr.Username+"/actions/echo", 1)
	close(ready)
	ws := wsBenchAgent(b, url, wsID)
	defer ws.CloseNow()

	consumer := wsBenchDial(b, url)
	defer consumer.CloseNow()
	var seq int
	invoke := func(id string) (time.Duration, error) {
		seq++
		mid := fmt.Sprintf("m-%d", seq)
		start := time.Now()
		if err := wsBenchSend(consumer, map[string]any{"messageType": "invokeAction", "messageId": mid, "thingId": id,
			"action": "echo", "input": map[string]any{"n": seq, "text": "hello agent"}}); err != nil {
			return 0, err
		}
		for {
			r, err := wsBenchRead(consumer)
			if err != nil {
				return 0, err
			}
			if r["correlationId"] != mid {
				continue
			}
			d := time.Since(start)
			out, _ := r["output"].(map[string]any)
			echo, _ := out["echo"].(map[string]any)
			if r["status"] != "completed" || echo["n"] != float64(seq) || out["agent"] != id {
				return 0, fmt.Errorf("bad result %v", r)
			}
			return d, nil
		}
	}
	for _, tc := range []struct{ name, id string }{{"to-mqtt-agent", mqttID}, {"to-ws-agent", wsID}} {
		b.Run(tc.name, func(b *testing.B) {
			for range 200 {
				if _, err := invoke(tc.id); err != nil {
					b.Fatal(err)
				}
			}
			var lat []time.Duration
			for b.Loop() {
				d, err := invoke(tc.id)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, d)
			}
			percentile.Report(b, lat, time.Millisecond, "ms")
		})
	}
}

// BenchmarkWSFanout1000: 1,000 WebSocket consumers subscribe to a
// WebSocket agent's event; each iteration the agent emits 20 events and
// the benchmark waits until every subscriber has all of them.
func BenchmarkWSFanout1000(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	const subscribers, burst = 1000, 20
	raiseNoFile(b, 2*subscribers+512)
	_, url, stop := startWSBenchHub(b)
	b.Cleanup(stop)
	id := benchAgentID(3)
	agent := wsBenchAgent(b, url, id)
	defer agent.CloseNow()
	conns := make([]*websocket.Conn, subscribers)
	for i := range conns {
		c := wsBenchDial(b, url)
		conns[i] = c
		if err := wsBenchSend(c, map[string]any{"messageType": "subscribeEvent", "messageId": "s", "thingId": id, "event": "alarm"}); err != nil {
			b.Fatal(err)
		}
		if r, err := wsBenchRead(c); err != nil || r["messageType"] != "acknowledgement" {
			b.Fatalf("subscribe: %v %v", r, err)
		}
	}
	benchFanout(b, conns, burst, func(i int) error {
		return wsBenchSend(agent, map[string]any{"messageType": "event", "messageId": uuid.NewString(), "thingId": id,
			"event": "alarm", "data": map[string]any{"i": i, "level": "warning"}})
	})
}

// BenchmarkWSIdleRSS builds the real binary, reads its RSS after 2 s idle,
// opens 1,000 WebSocket connections on /ws (each subscribed to one event
// of a registered Thing, as a dashboard tab would be), waits 2 s and reads
// it again.
func BenchmarkWSIdleRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	const clients = 1000
	raiseNoFile(b, 2*clients+512)
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	for b.Loop() {
		p := startHubBinary(b, bin, b.TempDir())
		url := "ws" + strings.TrimPrefix(p.httpBase, "http") + "/ws"
		id := benchAgentID(4)
		agent := wsBenchAgent(b, url, id)
		time.Sleep(2 * time.Second)
		base := procMemMB(b, p.pid)
		conns := make([]*websocket.Conn, clients)
		for i := range conns {
			c := wsBenchDial(b, url)
			conns[i] = c
			if err := wsBenchSend(c, map[string]any{"messageType": "subscribeEvent", "messageId": "s", "thingId": id, "event": "alarm"}); err != nil {
				b.Fatal(err)
			}
			if r, err := wsBenchRead(c); err != nil || r["messageType"] != "acknowledgement" {
				b.Fatalf("subscribe: %v %v", r, err)
			}
		}
		time.Sleep(2 * time.Second)
		loaded := procMemMB(b, p.pid)
		for _, c := range conns {
			c.CloseNow()
		}
		agent.CloseNow()
		p.stop()
		b.ReportMetric(base["VmRSS"], "idle-RSS-MB")
		b.ReportMetric(loaded["VmRSS"], "1k-ws-RSS-MB")
		b.ReportMetric((loaded["VmRSS"]-base["VmRSS"])*1024/clients, "KB/conn")
	}
}
