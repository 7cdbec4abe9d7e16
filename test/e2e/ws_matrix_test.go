package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// matrixAgent is an agent of either transport as the consumer matrix
// sees it: it serves temp, count and alarm.
type matrixAgent struct {
	id string
	// setTemp makes 21.5 the current value of temp where MQTT consumers
	// read it (the retained value).
	setTemp func()
	emit    func(level int)
}

func (h *testHub) mqttMatrixAgent(id string) matrixAgent {
	a := h.startAgent(id)
	return matrixAgent{id: id,
		setTemp: func() { a.mc.pub("lmos/v1/things/"+a.tid+"/properties/temp", []byte("21.5"), true) },
		emit: func(level int) {
			a.mc.pub("lmos/v1/things/"+a.tid+"/events/alarm", []byte(`{"level": `+itoa(level)+`}`), false)
		}}
}

func (h *testHub) wsMatrixAgent(id string) matrixAgent {
	a := h.startWSAgent(id, false)
	return matrixAgent{id: id,
		setTemp: func() {
			a.send(map[string]any{"messageType": "propertyReading", "thingId": id, "name": "temp", "value": 21.5}, false)
		},
		emit: func(level int) { a.emit("alarm", map[string]any{"level": level}) }}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// matrixConsumer reads temp, invokes count (each result as "status data")
// and subscribes alarm (next returns each event's data as JSON).
type matrixConsumer struct {
	read      func(a matrixAgent) string
	invoke    func(a matrixAgent) []string
	subscribe func(a matrixAgent) (next func() string)
}

func (h *testHub) httpConsumer() matrixConsumer {
	base := func(a matrixAgent) string { return "/proxy/" + pathEscape(a.id) }
	return matrixConsumer{
		read: func(a matrixAgent) string {
			a.setTemp()
			var body []byte
			waitFor(h.t, 5*time.Second, "temp readable", func() bool {
				resp, b := h.request("GET", base(a)+"/properties/temp", "", "", nil, "")
				body = b
				return resp.StatusCode == 200
			})
			return string(body)
		},
		invoke: func(a matrixAgent) []string {
			resp, body := h.request("POST", base(a)+"/actions/count", "", "text/event-stream", nil, testToken)
			if resp.StatusCode != 200 {
				h.t.Fatalf("invoke: %d %s", resp.StatusCode, body)
			}
			var out []string
			for _, e := range readSSE(h.t, strings.NewReader(string(body))) {
				out = append(out, e.Type+" "+e.Data)
			}
			return out
		},
		subscribe: func(a matrixAgent) func() string {
			s := h.openSSE(base(a)+"/events/alarm", "")
			h.t.Cleanup(s.Close)
			topic := "lmos/v1/things/" + lmos.TopicKey(a.id) + "/events/alarm"
			waitFor(h.t, 2*time.Second, "stream subscribed", func() bool { return h.Main.Broker.Subscribers(topic) >= 1 })
			return func() string { return s.next(5 * time.Second).Data }
		},
	}
}

func (h *testHub) mqttConsumer(clientID string) matrixConsumer {
	mc := h.mqttDial(&paho.Connect{CleanStart: true, ClientID: clientID})
	mc.sub("lmos/v1/clients/" + clientID + "/#")
	topic := func(a matrixAgent, rest string) string { return "lmos/v1/things/" + lmos.TopicKey(a.id) + "/" + rest }
	return matrixConsumer{
		read: func(a matrixAgent) string {
			mc.sub(topic(a, "properties/temp"))
			a.setTemp()
			return string(mc.next(topic(a, "properties/temp")).Payload)
		},
		invoke: func(a matrixAgent) []string {
			replyTo := "lmos/v1/clients/" + clientID + "/r/1"
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := mc.C.Publish(ctx, &paho.Publish{Topic: topic(a, "actions/count"), QoS: 1,
				Properties: &paho.PublishProperties{ResponseTopic: replyTo, CorrelationData: []byte("c1"), ContentType: "application/json"}}); err != nil {
				h.t.Fatal(err)
			}
			var out []string
			for len(out) == 0 || !strings.HasPrefix(out[len(out)-1], "completed") && !strings.HasPrefix(out[len(out)-1], "failed") {
				p := mc.next(replyTo)
				if string(p.Properties.CorrelationData) != "c1" {
					h.t.Fatalf("correlation data %q", p.Properties.CorrelationData)
				}
				out = append(out, p.Properties.User.Get("lmos-status")+" "+compact(p.Payload))
			}
			return out
		},
		subscribe: func(a matrixAgent) func() string {
			mc.sub(topic(a, "events/alarm"))
			return func() string { return compact(mc.next(topic(a, "events/alarm")).Payload) }
		},
	}
}

func (h *testHub) wsConsumer() matrixConsumer {
	w := h.wsDial("lmosprotocol", nil)
	return matrixConsumer{
		read: func(a matrixAgent) string {
			a.setTemp()
			var r map[string]any
			waitFor(h.t, 5*time.Second, "temp readable", func() bool {
				r = w.reply(w.send(map[string]any{"messageType": "readProperty", "thingId": a.id, "name": "temp"}, false))
				return r["messageType"] == "propertyReading"
			})
			if r["name"] != "temp" || r["timestamp"] == nil {
				h.t.Fatalf("propertyReading %v", r)
			}
			return jsonText(r["value"])
		},
		invoke: func(a matrixAgent) []string {
			id := w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "count"}, false)
			var out []string
			for len(out) == 0 || !strings.HasPrefix(out[len(out)-1], "completed") && !strings.HasPrefix(out[len(out)-1], "failed") {
				r := w.reply(id)
				if r["messageType"] != "actionStatus" || r["action"] != "count" {
					h.t.Fatalf("invoke reply %v", r)
				}
				data := ""
				if o, ok := r["output"]; ok {
					data = jsonText(o)
				}
				out = append(out, r["status"].(string)+" "+data)
			}
			return out
		},
		subscribe: func(a matrixAgent) func() string {
			id := w.send(map[string]any{"messageType": "subscribeEvent", "thingId": a.id, "event": "alarm"}, false)
			if r := w.reply(id); r["messageType"] != "acknowledgement" {
				h.t.Fatalf("subscribe: %v", r)
			}
			return func() string {
				r := w.next(func(m map[string]any) bool { return m["messageType"] == "event" })
				if r["event"] != "alarm" || r["thingId"] != a.id {
					h.t.Fatalf("event %v", r)
				}
				return jsonText(r["data"])
			}
		},
	}
}

func jsonText(v any) string { b, _ := json.Marshal(v); return string(b) }

func compact(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	return jsonText(v)
}

// TestWSMatrix: every consumer transport (HTTP proxy, MQTT, WebSocket)
// against every agent transport (MQTT, WebSocket), each with a read, a
// streamed invocation and an event (issue 5).
func TestWSMatrix(t *testing.T) {
	h := startHub(t, nil)
	agents := map[string]matrixAgent{
		"mqtt": h.mqttMatrixAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000b001"),
		"ws":   h.wsMatrixAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000b002"),
	}
	consumers := map[string]func() matrixConsumer{
		"http": h.httpConsumer,
		"mqtt": func() matrixConsumer { return h.mqttConsumer("matrix-" + uuidShort()) },
		"ws":   h.wsConsumer,
	}
	want := []string{"pending ", `running {"n":1}`, `running {"n":2}`, `running {"n":3}`, `completed {"done":true}`}
	level := 0
	for _, cn := range []string{"http", "mqtt", "ws"} {
		for _, an := range []string{"mqtt", "ws"} {
			t.Run(cn+"-to-"+an, func(t *testing.T) {
				c, a := consumers[cn](), agents[an]
				if got := c.read(a); got != "21.5" {
					t.Errorf("read temp = %q", got)
				}
				if got := c.invoke(a); strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("invoke count\n got %q\nwant %q", got, want)
				}
				next := c.subscribe(a)
				level++
				a.emit(level)
				if got := next(); got != `{"level":`+itoa(level)+`}` {
					t.Errorf("event = %s, want level %d", got, level)
				}
			})
		}
	}
}

func uuidShort() string { return strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") }
