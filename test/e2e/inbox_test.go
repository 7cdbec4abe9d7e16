package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// inboxTD is a Thing with two actions: echo answers at once, hold once the
// test lets it.
func inboxTD(id string) []byte {
	return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"Inbox test agent",`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc",`+
		`"actions":{"echo":{},"hold":{}}}`, id)
}

// TestAnonymousInboxHeldByItsConnection (issue 24 point 8): an anonymous
// MQTT 5 consumer (Python paho) on 127.0.0.1 invokes actions with its
// reply inbox as Response Topic. Clients on 127.0.0.2 connecting with its
// client id — paho MQTT 5 and 3.1.1 anonymously, paho with another
// Thing's credentials (anyone gets some by joining), mosquitto_sub MQTT 5
// and 3.1.1, mqtt.js MQTT 5 and 3.1.1 — are each refused with CONNACK 0x85 Client Identifier not
// valid (3.1.1: return code 2), counted, and never read the inbox; the
// consumer stays connected and gets every reply owed to it, one held
// across the attempts included. Its own address may take the id over (a
// connection that died unnoticed coming back): the old connection gets
// DISCONNECT 0x8E, the new one the replies. An empty client id gets a
// random one from the hub.
func TestAnonymousInboxHeldByItsConnection(t *testing.T) {
	mosqSub := mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr := h.Main.MQTTAddr.String()
	host, port, _ := strings.Cut(addr, ":")

	const id = "urn:example:inbox-agent"
	release := make(chan struct{})
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + addr, TD: inboxTD(id), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.HandleAction("echo", func(context.Context, agent.Input) (any, error) { return map[string]any{"ok": true}, nil })
	a.HandleAction("hold", func(ctx context.Context, _ agent.Input) (any, error) {
		select {
		case <-release:
			return map[string]any{"held": true}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	thief := h.mqttDial(nil).join("urn:example:inbox-thief", makeTD("urn:example:inbox-thief", "Thief"))

	const cid = "consumer-7"
	p := startScript(t, ctx, "paho inbox", "paho_inbox.py", host, port, cid)
	echo, hold := lmos.ThingTopic(id, "actions/echo"), lmos.ThingTopic(id, "actions/hold")
	reply := func(corr string) {
		t.Helper()
		m := p.next(20*time.Second, func(m map[string]any) bool {
			if m["stolen"] != nil || m["victim_disconnected"] != nil || m["old_disconnected"] != nil {
				t.Errorf("while waiting for the reply %s: %v", corr, m)
			}
			return m["reply"] == corr && m["status"] == "completed"
		})
		t.Logf("reply %v", m)
	}

	p.do(10*time.Second, map[string]any{"cmd": "victim", "bind": "127.0.0.1"})
	p.do(10*time.Second, map[string]any{"cmd": "invoke", "topic": hold, "corr": "held-1"})
	p.do(10*time.Second, map[string]any{"cmd": "invoke", "topic": echo, "corr": "echo-1"})
	reply("echo-1")

	// The attempts from another address.
	attacks := []map[string]any{
		{"cmd": "attack", "bind": "127.0.0.2", "v": 5},
		{"cmd": "attack", "bind": "127.0.0.2", "v": 4},
		{"cmd": "attack", "bind": "127.0.0.2", "v": 5, "username": thief.Username, "password": thief.Password},
		{"cmd": "attack", "bind": "127.0.0.2", "v": 4, "username": thief.Username, "password": thief.Password},
	}
	for _, c := range attacks {
		p.send(c)
		m := p.next(20*time.Second, func(m map[string]any) bool { return m["attack"] != nil })
		want := map[int]float64{5: 0x85, 4: 2}[c["v"].(int)]
		if m["attack"] != want {
			t.Errorf("%v: CONNACK %v, want %v", c, m["attack"], want)
		}
		okOf(t, p, "attack")
	}
	// mosquitto_sub exits with the CONNACK's code.
	for _, v := range []struct {
		flag, want string
		code       int
	}{{"mqttv5", "client identifier not valid", 0x85}, {"mqttv311", "identifier rejected", 2}} {
		out, err := exec.CommandContext(ctx, mosqSub, "-h", host, "-p", port, "-A", "127.0.0.2", "-V", v.flag, "-i", cid,
			"-t", "lmos/v1/clients/"+cid+"/#", "-C", "1", "-W", "10").CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != v.code || !strings.Contains(strings.ToLower(string(out)), v.want) {
			t.Errorf("mosquitto_sub %s from 127.0.0.2: %v %q, want exit code %d saying %q", v.flag, err, out, v.code, v.want)
		}
	}
	// mqtt.js, anonymous and with the Thing's credentials.
	js := hubtest.InteropScript(t, "mqttjs-inbox.mjs", "mqtt")
	jsAttacks := [][]string{{"5"}, {"4"}, {"5", thief.Username, thief.Password}}
	for _, args := range jsAttacks {
		out, err := exec.CommandContext(ctx, "node", append([]string{js, host, port, "127.0.0.2", args[0], cid}, args[1:]...)...).CombinedOutput()
		want := map[string]string{"5": `{"connack":133,"v":5}`, "4": `{"connack":2,"v":4}`}[args[0]]
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("mqtt.js MQTT %s from 127.0.0.2: %v %q, want %s", args[0], err, out, want)
		}
	}
	if n, want := h.Main.Broker.Refused("mqtt.clientIdHeld"), uint64(len(attacks)+2+len(jsAttacks)); n != want {
		t.Errorf("mqtt.clientIdHeld refusals %d, want %d", n, want)
	}

	// Every reply owed reaches the consumer, which is still connected.
	close(release)
	reply("held-1")
	p.do(10*time.Second, map[string]any{"cmd": "invoke", "topic": echo, "corr": "echo-2"})
	reply("echo-2")
	p.send(map[string]any{"cmd": "state"})
	st := p.next(10*time.Second, func(m map[string]any) bool { return m["replies"] != nil })
	if st["victim_up"] != true {
		t.Errorf("the consumer is not connected: %v", st)
	}
	okOf(t, p, "state")

	// Its own address takes the id over; the replies follow it.
	p.do(10*time.Second, map[string]any{"cmd": "takeover", "bind": "127.0.0.1"})
	m := p.next(10*time.Second, func(m map[string]any) bool { return m["old_disconnected"] != nil })
	if m["old_disconnected"] != float64(0x8E) {
		t.Errorf("the old connection's end: %v, want DISCONNECT 0x8E", m)
	}
	p.do(10*time.Second, map[string]any{"cmd": "invoke", "topic": echo, "corr": "echo-3"})
	reply("echo-3")

	// An empty client id: a random one, told in the CONNACK.
	p.send(map[string]any{"cmd": "assigned"})
	as := p.next(10*time.Second, func(m map[string]any) bool { return m["assigned"] != nil })
	ids, _ := as["assigned"].([]any)
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("assigned client ids %v", as)
	}
	for _, x := range ids {
		s, _ := x.(string)
		if !strings.HasPrefix(s, "lmos-") || len(s) != len("lmos-")+26 || strings.ContainsAny(s, "/+#") {
			t.Errorf("assigned client id %q: want lmos- and 26 base32 letters (128 random bits)", s)
		}
	}
	okOf(t, p, "assigned")
	for _, m := range p.drain() {
		if m["stolen"] != nil || m["victim_disconnected"] != nil || m["error"] != nil {
			t.Errorf("report %v", m)
		}
	}
	p.check()
	if t.Failed() {
		t.Logf("paho:\n%s", p.stderrText())
	}
	p.exit()
}

// okOf waits for the script's {"ok": cmd} of a command sent with send.
func okOf(t *testing.T, p *scriptProc, cmd string) {
	t.Helper()
	select {
	case ok := <-p.oks:
		if ok != cmd {
			t.Fatalf("%s: ok %q, want %q", p.name, ok, cmd)
		}
	case <-p.exited:
		t.Fatalf("%s exited\n%s", p.name, p.stderrText())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no ok for %s\n%s", p.name, cmd, p.stderrText())
	}
}
