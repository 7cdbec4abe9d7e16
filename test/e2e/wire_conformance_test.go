package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Things of the conformance test: an MQTT agent that serves echo and has a
// retained property, one that joined and left (offline), and one id that
// is not registered.
const (
	wireAgentID  = "urn:wire:agent"
	wireGoneID   = "urn:wire:gone"
	wireNobodyID = "urn:wire:nobody"
	wireAgentCID = "wire-agent"
)

// Which protocol versions a case runs in: 4 is MQTT 3.1.1, 3 is MQTT 3.1
// (protocol name MQIsdp).
var (
	both   = []int{4, 5}
	all    = []int{3, 4, 5}
	v5only = []int{5}
)

// wireCase is one row of the conformance table: what the client sends and
// which packets, with which reason codes and fields, the broker must write
// back, each decoded by mqtt-packet's strict parser.
type wireCase struct {
	name     string
	versions []int
	run      func(w *wire, c string, v int)
}

// TestWireConformance is issue 10's wire-conformance test: every packet
// type the hub writes (CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP,
// SUBACK, UNSUBACK, PINGRESP, DISCONNECT), in MQTT 3.1.1 and 5, with and
// without properties, QoS 0/1/2, retained, refused (ACL, quota, packet too
// large) and the no-subscriber answer, decoded by npm mqtt-packet (the
// parser of mqtt.js) plus the checks of mqtt-wire.mjs. Any decoding error
// fails the test; every packet each connection was owed is counted, and
// nothing else may arrive. The server DISCONNECT on shutdown is
// TestWireShutdown.
func TestWireConformance(t *testing.T) {
	h := startHub(t, nil)
	w := startWire(t, h.Main.MQTTAddr.String())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mqttURL := "mqtt://" + h.Main.MQTTAddr.String()
	td := func(id string) map[string]any {
		return map[string]any{"id": id, "title": id, "@type": "lmos:Agent",
			"properties": map[string]any{"level": map[string]any{"type": "number"}},
			"actions":    map[string]any{"echo": map[string]any{}}}
	}
	a, err := agent.Connect(ctx, agent.Options{URL: mqttURL, TD: td(wireAgentID), ClientID: wireAgentCID})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.HandleAction("echo", func(_ context.Context, in agent.Input) (any, error) { return in, nil })
	if err := a.SetProperty("level", 42); err != nil {
		t.Fatal(err)
	}
	gone, err := agent.Connect(ctx, agent.Options{URL: mqttURL, TD: td(wireGoneID)})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	agentKey := lmos.TopicKey(wireAgentID)
	actions := func(id, name string) string { return "lmos/v1/things/" + lmos.TopicKey(id) + "/actions/" + name }
	// SetProperty returned after the PUBACK: the level is retained.
	waitFor(t, 5*time.Second, "the closed agent offline", func() bool {
		status, _ := h.presenceOf(wireGoneID)
		return status == "offline"
	})

	inbox := func(c string) string { return "lmos/v1/clients/" + c + "/" }
	subscribe := func(w *wire, c string, v, id int, filters []any, props map[string]any) *wirePacket {
		pk := map[string]any{"cmd": "subscribe", "messageId": id, "subscriptions": filters}
		if v == 5 && props != nil {
			pk["properties"] = props
		}
		w.send(c, pk)
		return w.takeReason(c, "suback", id, -1)
	}
	filter := func(topic string, qos int) map[string]any { return map[string]any{"topic": topic, "qos": qos} }
	publish := func(topic string, qos, id int, payload string, props map[string]any) map[string]any {
		pk := map[string]any{"cmd": "publish", "topic": topic, "qos": qos, "payload": payload}
		if qos > 0 {
			pk["messageId"] = id
		}
		if props != nil {
			pk["properties"] = props
		}
		return pk
	}
	// ok is the reason of a successful acknowledgement: 0x00 in MQTT 5,
	// none at all in 3.1.1.
	ok := func(v int) int {
		if v == 5 {
			return 0
		}
		return -1
	}
	// failedResult takes the hub's failed result on c's inbox and checks it.
	failedResult := func(w *wire, c, corr string, status int, typ string) {
		p := w.take(c, "publish", func(p *wirePacket) bool { return p.bytesProp("correlationData") == corr })
		var prob struct {
			Type   string
			Status int
			Detail string
		}
		if err := json.Unmarshal(p.Payload, &prob); err != nil || p.user("lmos-status") != "failed" ||
			prob.Status != status || prob.Type != lmos.ErrorTypeBase+typ || p.Properties["contentType"] != "application/json" {
			w.t.Errorf("%s: failed result %s (%s), want %d %s", c, p, p.Payload, status, typ)
		}
	}

	cases := []wireCase{
		{"CONNACK accepted, PINGRESP", all, func(w *wire, c string, v int) {
			ca := w.open(c, v, map[string]any{"clientId": c})
			if ca.reason() != 0 || ca.SessionPresent {
				w.t.Errorf("CONNACK %s", ca)
			}
			if v == 5 && (ca.Properties["maximumPacketSize"] != float64(1<<20) || ca.Properties["receiveMaximum"] != float64(256)) {
				w.t.Errorf("CONNACK properties %v", ca.Properties)
			}
			w.send(c, map[string]any{"cmd": "pingreq"})
			w.take(c, "pingresp", nil)
		}},
		{"SUBACK granted and refused ($SYS/#, wildcard over Things), UNSUBACK", all, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			refused := map[int]int{3: 0x80, 4: 0x80, 5: 0x87}[v]
			sa := subscribe(w, c, v, 1, []any{filter(inbox(c)+"#", 2), filter("$SYS/#", 0), filter("lmos/v1/things/+/+", 1),
				filter("lmos/v1/hub/events", 0)}, map[string]any{"userProperties": map[string]any{"k": "v"}})
			if want := []int{2, refused, refused, 0}; !slices.Equal(sa.Granted, want) {
				w.t.Errorf("SUBACK granted %v, want %v", sa.Granted, want)
			}
			w.send(c, map[string]any{"cmd": "unsubscribe", "messageId": 2, "unsubscriptions": []any{inbox(c) + "#", "never/subscribed"}})
			ua := w.take(c, "unsuback", nil)
			if v == 5 && !slices.Equal(ua.Granted, []int{0, 0x11}) {
				w.t.Errorf("UNSUBACK codes %v, want [0 0x11]", ua.Granted)
			}
			w.drained(c)
		}},
		{"PUBLISH QoS 0/1/2 both ways, with and without properties", all, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			subscribe(w, c, v, 1, []any{filter(inbox(c)+"#", 2)}, map[string]any{"subscriptionIdentifier": 7})
			props := map[string]any{
				"userProperties": map[string]any{"lmos-status": "completed", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
				"contentType":    "application/json", "correlationData": b64("corr"), "messageExpiryInterval": 60,
				"responseTopic": inbox(c) + "back", "payloadFormatIndicator": true,
			}
			for qos := 0; qos <= 2; qos++ {
				for _, withProps := range []bool{false, true} {
					if withProps && v != 5 {
						continue
					}
					var pr map[string]any
					if withProps {
						pr = props
					}
					id := 10 + qos*2
					if withProps {
						id++
					}
					topic := fmt.Sprintf("%sq%d/%v", inbox(c), qos, withProps)
					w.send(c, publish(topic, qos, id, `{"n":1}`, pr))
					switch qos {
					case 1:
						w.takeReason(c, "puback", id, ok(v))
					case 2:
						w.takeReason(c, "pubrec", id, ok(v))
						w.send(c, map[string]any{"cmd": "pubrel", "messageId": id})
						w.takeReason(c, "pubcomp", id, ok(v))
					}
					d := w.take(c, "publish", func(p *wirePacket) bool { return p.Topic == topic })
					if d.QoS != qos || string(d.Payload) != `{"n":1}` || d.Retain {
						w.t.Errorf("delivery %s", d)
					}
					if v == 5 {
						if ids, _ := d.Properties["subscriptionIdentifier"].(float64); ids != 7 {
							w.t.Errorf("delivery without subscription identifier 7: %s", d)
						}
					}
					if withProps && (d.user("lmos-status") != "completed" || d.Properties["contentType"] != "application/json" ||
						d.bytesProp("correlationData") != "corr" || d.Properties["responseTopic"] != inbox(c)+"back" ||
						d.Properties["messageExpiryInterval"] == nil) {
						w.t.Errorf("delivery lost properties: %s", d)
					}
					switch qos { // the client's side of the flow
					case 1:
						w.send(c, map[string]any{"cmd": "puback", "messageId": d.MessageID})
					case 2:
						w.send(c, map[string]any{"cmd": "pubrec", "messageId": d.MessageID})
						w.takeReason(c, "pubrel", d.MessageID, ok(v))
						w.send(c, map[string]any{"cmd": "pubcomp", "messageId": d.MessageID})
					}
				}
			}
			w.drained(c)
		}},
		{"retained deliveries (a Thing's property, the hub status)", all, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			subscribe(w, c, v, 1, []any{filter("lmos/v1/things/"+agentKey+"/properties/+", 1), filter("lmos/v1/hub/status", 0)}, nil)
			level := w.take(c, "publish", func(p *wirePacket) bool { return p.Topic == "lmos/v1/things/"+agentKey+"/properties/level" })
			status := w.take(c, "publish", func(p *wirePacket) bool { return p.Topic == "lmos/v1/hub/status" })
			if !level.Retain || string(level.Payload) != "42" || !status.Retain || status.QoS != 0 {
				w.t.Errorf("retained: %s %s", level, status)
			}
			if v == 5 && (level.Properties["contentType"] != "application/json" || status.Properties["contentType"] != "application/json") {
				w.t.Errorf("retained content types: %s %s", level, status)
			}
			if level.QoS == 1 {
				w.send(c, map[string]any{"cmd": "puback", "messageId": level.MessageID})
			}
			w.drained(c)
		}},
		{"refused by the ACL: PUBACK/PUBREC 0x87 (3.1.1: acknowledged, dropped)", both, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			w.send(c, publish("not/lmos", 1, 1, "x", nil))
			w.takeReason(c, "puback", 1, map[int]int{4: -1, 5: 0x87}[v])
			w.send(c, publish("lmos/v1/things/"+agentKey+"/status", 2, 2, "offline", nil))
			w.takeReason(c, "pubrec", 2, map[int]int{4: -1, 5: 0x87}[v])
			if v == 4 {
				w.send(c, map[string]any{"cmd": "pubrel", "messageId": 2})
				w.takeReason(c, "pubcomp", 2, -1)
			}
			w.drained(c)
		}},
		{"refused: Response Topic outside the inboxes, PUBACK 0x87", v5only, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			w.send(c, publish(actions(wireAgentID, "echo"), 1, 1, "{}", map[string]any{"responseTopic": "lmos/v1/things/" + agentKey + "/td"}))
			w.takeReason(c, "puback", 1, 0x87)
			// QoS 2: dropped after an ordinary PUBREC (PROTOCOL §10).
			w.send(c, publish(actions(wireAgentID, "echo"), 2, 2, "{}", map[string]any{"responseTopic": "elsewhere"}))
			w.takeReason(c, "pubrec", 2, 0)
			w.send(c, map[string]any{"cmd": "pubrel", "messageId": 2})
			w.takeReason(c, "pubcomp", 2, 0)
			w.drained(c)
		}},
		{"served request: PUBACK 0x00 and the agent's result", both, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			subscribe(w, c, v, 1, []any{filter(inbox(c)+"#", 1)}, nil)
			var props map[string]any
			if v == 5 {
				props = map[string]any{"responseTopic": inbox(c) + "r", "correlationData": b64("s1"), "contentType": "application/json"}
			}
			w.send(c, publish(actions(wireAgentID, "echo"), 1, 2, `{"x":1}`, props))
			w.takeReason(c, "puback", 2, ok(v))
			if v == 5 {
				r := w.take(c, "publish", nil)
				if r.bytesProp("correlationData") != "s1" || r.user("lmos-status") != "completed" || string(r.Payload) != `{"x":1}` {
					w.t.Errorf("result %s", r)
				}
				if r.QoS == 1 {
					w.send(c, map[string]any{"cmd": "puback", "messageId": r.MessageID})
				}
			}
			w.drained(c)
		}},
		{"no subscriber: PUBACK 0x10 and a failed result (404 unknown, 503 offline)", both, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			subscribe(w, c, v, 1, []any{filter(inbox(c)+"#", 0)}, nil)
			rows := []struct {
				topic, corr string
				status      int
				typ         string
			}{
				{actions(wireNobodyID, "run"), "n1", 404, "not-found"},
				{actions(wireGoneID, "nope"), "n2", 404, "not-found"},
				{actions(wireGoneID, "echo"), "n3", 503, "unavailable"},
				{"lmos/v1/things/" + lmos.TopicKey(wireGoneID) + "/properties/level/set", "n4", 503, "unavailable"},
				{"lmos/v1/things/" + lmos.TopicKey(wireGoneID) + "/properties/nope/set", "n5", 404, "not-found"},
			}
			for i, r := range rows {
				var props map[string]any
				if v == 5 {
					props = map[string]any{"responseTopic": inbox(c) + "r", "correlationData": b64(r.corr)}
				}
				w.send(c, publish(r.topic, 1, 10+i, "1", props))
				w.takeReason(c, "puback", 10+i, map[int]int{4: -1, 5: 0x10}[v])
				if v == 5 {
					failedResult(w, c, r.corr, r.status, r.typ)
				}
			}
			// Fire and forget (no Response Topic): the acknowledgement says it.
			w.send(c, publish(actions(wireNobodyID, "run"), 1, 20, "1", nil))
			w.takeReason(c, "puback", 20, map[int]int{4: -1, 5: 0x10}[v])
			if v == 5 {
				// QoS 0 and 2 with a Response Topic: the result says it.
				w.send(c, publish(actions(wireNobodyID, "run"), 0, 0, "1", map[string]any{"responseTopic": inbox(c) + "r", "correlationData": b64("q0")}))
				failedResult(w, c, "q0", 404, "not-found")
				w.send(c, publish(actions(wireNobodyID, "run"), 2, 21, "1", map[string]any{"responseTopic": inbox(c) + "r", "correlationData": b64("q2")}))
				w.takeReason(c, "pubrec", 21, 0)
				w.send(c, map[string]any{"cmd": "pubrel", "messageId": 21})
				w.takeReason(c, "pubcomp", 21, 0)
				failedResult(w, c, "q2", 404, "not-found")
			}
			w.drained(c)
		}},
		{"CONNACK refusals: the hub's client id, another username's client id, a wrong password", both, func(w *wire, c string, v int) {
			badAuth := map[int]int{4: 0x05, 5: 0x86}[v] // mochi: 3.1.1 "not authorized"
			idTaken := map[int]int{4: 0x02, 5: 0x85}[v]
			for i, r := range []struct {
				connect map[string]any
				reason  int
			}{
				{map[string]any{"clientId": "inline"}, badAuth},
				{map[string]any{"clientId": wireAgentCID}, idTaken},
				{map[string]any{"clientId": c, "username": agentKey, "password": b64("wrong")}, badAuth},
			} {
				conn := fmt.Sprintf("%s-%d", c, i)
				ca := w.open(conn, v, r.connect)
				if ca.reason() != r.reason || ca.SessionPresent {
					w.t.Errorf("%v: CONNACK %s, want reason %#x", r.connect, ca, r.reason)
				}
				if rest := w.closed(conn); len(rest) > 0 {
					w.t.Errorf("%v: after the CONNACK: %v", r.connect, rest)
				}
			}
		}},
		{"refused: packet too large (over 1 MiB) closes the connection", both, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			w.command(map[string]any{"op": "send", "conn": c, "fill": 1<<20 + 1, "packet": publish(inbox(c)+"big", 1, 1, "", nil)})
			rest := w.closed(c)
			for _, p := range rest {
				if p.Cmd != "disconnect" || v != 5 || p.reason() != 0x95 {
					w.t.Errorf("before the close: %s", p)
				}
			}
			w.t.Logf("v%d packet too large: %d packet(s) before the close %v", v, len(rest), rest)
		}},
		{"refused: receive maximum (256 unreleased QoS 2) exceeded", both, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			for i := 1; i <= 257; i++ {
				w.send(c, publish(inbox(c)+"q", 2, i, "x", nil))
			}
			for i := 1; i <= 256; i++ {
				w.takeReason(c, "pubrec", i, ok(v))
			}
			rest := w.closed(c)
			if v == 5 && (len(rest) != 1 || rest[0].Cmd != "disconnect" || rest[0].reason() != 0x93) {
				w.t.Errorf("v5: before the close %v, want DISCONNECT 0x93", rest)
			}
			if v == 4 && len(rest) != 0 {
				w.t.Errorf("3.1.1: before the close %v, want nothing", rest)
			}
		}},
		{"the client's limits: Maximum Packet Size, Receive Maximum, no problem information", v5only, func(w *wire, c string, v int) {
			if ca := w.open(c, v, map[string]any{"clientId": c, "properties": map[string]any{
				"maximumPacketSize": 256, "receiveMaximum": 2, "requestProblemInformation": false}}); ca.reason() != 0 {
				w.t.Fatalf("CONNACK %s", ca)
			}
			subscribe(w, c, v, 1, []any{filter(inbox(c)+"#", 1)}, nil)
			// Too large for the client: never sent to it.
			w.command(map[string]any{"op": "send", "conn": c, "fill": 300, "packet": publish(inbox(c)+"big0", 0, 0, "", nil)})
			w.command(map[string]any{"op": "send", "conn": c, "fill": 300, "packet": publish(inbox(c)+"big1", 1, 2, "", nil)})
			w.takeReason(c, "puback", 2, 0)
			// Refused without a reason string (the client asked for none).
			w.send(c, publish("not/lmos", 1, 3, "x", nil))
			w.takeReason(c, "puback", 3, 0x87)
			for i := 0; i < 4; i++ {
				w.send(c, publish(fmt.Sprintf("%ssmall%d", inbox(c), i), 1, 10+i, "x", nil))
				w.takeReason(c, "puback", 10+i, 0)
			}
			var got []string
			for range 4 {
				d := w.take(c, "publish", nil)
				got = append(got, d.Topic)
				w.send(c, map[string]any{"cmd": "puback", "messageId": d.MessageID})
			}
			slices.Sort(got)
			if want := []string{inbox(c) + "small0", inbox(c) + "small1", inbox(c) + "small2", inbox(c) + "small3"}; !slices.Equal(got, want) {
				w.t.Errorf("deliveries %v, want %v", got, want)
			}
			w.drained(c)
		}},
		{"persistent session: session present, the queued QoS 1 message on reconnect", both, func(w *wire, c string, v int) {
			// Sessions persist for identities only (PROTOCOL §10): the
			// client is a Thing, joined here, with its credentials.
			creds := wireJoin(w, c+"-join", v, "urn:wire:"+c)
			connect := map[string]any{"clientId": c, "clean": false, "username": creds.Username, "password": b64(creds.Password)}
			if v == 5 {
				connect["properties"] = map[string]any{"sessionExpiryInterval": 60}
			}
			w.open(c+"-1", v, connect)
			subscribe(w, c+"-1", v, 1, []any{filter(inbox(c)+"#", 1)}, nil)
			w.send(c+"-1", map[string]any{"cmd": "disconnect"})
			w.closed(c + "-1")
			w.connect(c+"-other", v, c+"-other")
			w.send(c+"-other", publish(inbox(c)+"queued", 1, 1, "while away", nil))
			w.takeReason(c+"-other", "puback", 1, ok(v)) // the offline session subscribes: no 0x10
			ca := w.open(c+"-2", v, connect)
			if ca.reason() != 0 || !ca.SessionPresent {
				w.t.Errorf("CONNACK %s, want session present", ca)
			}
			d := w.take(c+"-2", "publish", nil)
			if d.Topic != inbox(c)+"queued" || string(d.Payload) != "while away" || d.QoS != 1 {
				w.t.Errorf("queued delivery %s", d)
			}
			w.send(c+"-2", map[string]any{"cmd": "puback", "messageId": d.MessageID})
			w.drained(c + "-2")
			// End the session, so it holds nothing after the test.
			if v == 5 {
				w.send(c+"-2", map[string]any{"cmd": "disconnect", "properties": map[string]any{"sessionExpiryInterval": 0}})
			} else {
				w.send(c+"-2", map[string]any{"cmd": "disconnect"})
			}
			w.closed(c + "-2")
		}},
		{"a will, with its properties", both, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			subscribe(w, c, v, 1, []any{filter(inbox(c)+"#", 1)}, nil)
			will := map[string]any{"topic": inbox(c) + "will", "payload": "gone", "qos": 1}
			if v == 5 {
				// The last user property pretends to be the hub's own carrier
				// of will properties: dropped.
				will["properties"] = map[string]any{"contentType": "text/plain", "responseTopic": inbox(c) + "r",
					"correlationData": b64("w1"), "payloadFormatIndicator": true,
					"userProperties": map[string]any{"why": "test", "lmos-hub-will-properties": `{"ct":"forged"}`}}
			}
			w.open(c+"-w", v, map[string]any{"clientId": c + "-w", "will": will})
			w.command(map[string]any{"op": "end", "conn": c + "-w"})
			w.closed(c + "-w")
			d := w.take(c, "publish", nil)
			if d.Topic != inbox(c)+"will" || string(d.Payload) != "gone" || v == 5 && (d.Properties["contentType"] != "text/plain" ||
				d.user("why") != "test" || d.user("lmos-hub-will-properties") != "" || d.Properties["responseTopic"] != inbox(c)+"r" ||
				d.bytesProp("correlationData") != "w1" || d.Properties["payloadFormatIndicator"] != true) {
				w.t.Errorf("will %s", d)
			}
			w.send(c, map[string]any{"cmd": "puback", "messageId": d.MessageID})
			w.drained(c)
		}},
		{"session taken over: DISCONNECT 0x8E (3.1.1: closed)", both, func(w *wire, c string, v int) {
			w.connect(c+"-1", v, c)
			w.connect(c+"-2", v, c)
			rest := w.closed(c + "-1")
			if v == 5 && (len(rest) != 1 || rest[0].Cmd != "disconnect" || rest[0].reason() != 0x8E) || v == 4 && len(rest) != 0 {
				w.t.Errorf("the first connection got %v before its close", rest)
			}
			w.drained(c + "-2")
		}},
		{"refused: a topic alias (none offered), DISCONNECT 0x94", v5only, func(w *wire, c string, v int) {
			w.connect(c, v, c)
			w.send(c, publish(inbox(c)+"a", 1, 1, "x", map[string]any{"topicAlias": 1}))
			if rest := w.closed(c); len(rest) != 1 || rest[0].Cmd != "disconnect" || rest[0].reason() != 0x94 {
				w.t.Errorf("topic alias: %v, want DISCONNECT 0x94", rest)
			}
		}},
		{"refused: an unknown protocol level, answered as 3.1.1 (0x01)", []int{4}, func(w *wire, c string, v int) {
			w.command(map[string]any{"op": "open", "conn": c, "version": v})
			w.event(c)
			// CONNECT, protocol name MQTT, level 6, clean, keep alive 30, client id "x".
			w.command(map[string]any{"op": "raw", "conn": c, "hex": "100d00044d5154540602001e000178"})
			rest := w.closed(c)
			if len(rest) != 1 || rest[0].Cmd != "connack" || rest[0].reason() != 0x01 || rest[0].Length != 2 {
				w.t.Errorf("protocol level 6: %v, want a 3.1.1 CONNACK 0x01 and the close", rest)
			}
		}},
	}
	for _, tc := range cases {
		for _, v := range tc.versions {
			t.Run(fmt.Sprintf("%s/v%d", tc.name, v), func(t *testing.T) {
				w.t = t
				tc.run(w, fmt.Sprintf("c%d-v%d", slices.IndexFunc(cases, func(x wireCase) bool { return x.name == tc.name }), v), v)
				if errs := w.takeErrors(); len(errs) > 0 {
					t.Fatalf("strict decoder: %v", errs)
				}
			})
		}
	}
	w.t = t
}

// TestWireShutdown: a hub that stops sends MQTT 5 clients DISCONNECT 0x8B
// Server shutting down, and closes 3.1.1 connections (which have no server
// DISCONNECT); both decoded by mqtt-packet.
//
// Python paho-mqtt, an MQTT 3.1.1 client nobody here wrote, sees the
// connection lost (rc 7), not a protocol error (rc 2, "Unrecognised
// command"), which mochi's DISCONNECT to 3.1.1 clients caused.
func TestWireShutdown(t *testing.T) {
	h := startHub(t, nil)
	addr := h.Main.MQTTAddr.String()
	w := startWire(t, addr)
	w.connect("v5", 5, "shut-v5")
	w.connect("v3", 4, "shut-v3")
	paho := startPahoV311(t, addr, "shut-paho")
	h.Close()
	if rest := w.closed("v5"); len(rest) != 1 || rest[0].Cmd != "disconnect" || rest[0].reason() != 0x8B {
		t.Errorf("v5: %v before the close, want DISCONNECT 0x8B", rest)
	}
	if rest := w.closed("v3"); len(rest) != 0 {
		t.Errorf("3.1.1: %v before the close, want nothing", rest)
	}
	if got := paho(); got != "disconnected 7" {
		t.Errorf("paho-mqtt 3.1.1: %q, want only \"disconnected 7\" (connection lost)", got)
	}
}

// startPahoV311 starts test/interop/paho_v311.py and waits until it is
// connected; the returned func waits for it to end and returns what it
// printed after "connected".
func startPahoV311(t *testing.T, addr, clientID string) func() string {
	t.Helper()
	py := pahoPython(t)
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, py, "../interop/paho_v311.py", host, port, clientID)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "connected" {
		t.Fatalf("paho-mqtt: %q %s", sc.Text(), stderr.String())
	}
	return func() string {
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("paho-mqtt: %v %s", err, stderr.String())
		}
		return strings.Join(lines, "; ")
	}
}

// wireJoin joins the Thing id anonymously on a connection of its own and
// returns the credentials the hub issued.
func wireJoin(w *wire, conn string, v int, id string) joinCreds {
	w.t.Helper()
	w.connect(conn, v, conn)
	result := "lmos/v1/things/" + lmos.TopicKey(id) + "/td/result"
	w.send(conn, map[string]any{"cmd": "subscribe", "messageId": 1, "subscriptions": []any{map[string]any{"topic": result, "qos": 0}}})
	w.expect(conn, "suback")
	w.send(conn, map[string]any{"cmd": "publish", "topic": "lmos/v1/things/" + lmos.TopicKey(id) + "/td", "qos": 0, "payload": string(makeTD(id, id))})
	d := w.expect(conn, "publish")
	var res struct {
		Status      string     `json:"status"`
		Credentials *joinCreds `json:"credentials"`
	}
	if err := json.Unmarshal(d.Payload, &res); err != nil || d.Topic != result || res.Credentials == nil {
		w.t.Fatalf("join %s: %s %s (%v)", id, d.Topic, d.Payload, err)
	}
	w.send(conn, map[string]any{"cmd": "disconnect"})
	w.closed(conn)
	return *res.Credentials
}
