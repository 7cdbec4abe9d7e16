package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// mqttClient is hubtest's MQTT client with the shorthands of this
// package's tests (QoS 1, failing the test on an error).
type mqttClient struct{ *mqttclient.Client }

// mqttDial connects to the hub's broker; cp nil is an anonymous clean start.
func (h *testHub) mqttDial(cp *paho.Connect) *mqttClient {
	h.t.Helper()
	return &mqttClient{h.MQTT(cp)}
}

func (m *mqttClient) sub(filter string) { m.MustSub(filter) }

func (m *mqttClient) pub(topic string, payload []byte, retain bool) {
	m.MustPub(topic, payload, 1, retain)
}

func (m *mqttClient) next(topic string) *paho.Publish { return m.Next(topic) }

type joinCreds = mqttclient.Creds

// join publishes td for id and returns the issued credentials.
func (m *mqttClient) join(id string, td []byte) joinCreds { return m.MustJoin(lmos.TopicKey(id), td) }

// presenceOf reads lmos:presence from GET /things/{id}.
func (h *testHub) presenceOf(id string) (status, via string) {
	h.t.Helper()
	return h.Presence(id)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Eventually(t, d, what, cond)
}

func TestMQTTJoinPresenceOverHTTP(t *testing.T) {
	h := startHub(t, nil)
	const id = "urn:uuid:5b0d6c1e-0000-4000-8000-0000000000aa"
	tid := lmos.TopicKey(id)
	creds := h.mqttDial(nil).join(id, makeTD(id, "Thermostat"))
	if creds.Username != tid {
		t.Fatalf("username %q", creds.Username)
	}
	th := h.mqttDial(&paho.Connect{
		CleanStart: true, Username: creds.Username, UsernameFlag: true, Password: []byte(creds.Password), PasswordFlag: true,
		WillMessage: &paho.WillMessage{Topic: "lmos/v1/things/" + tid + "/status", Payload: []byte("offline"), Retain: true, QoS: 1},
	})
	th.pub("lmos/v1/things/"+tid+"/status", []byte("online"), true)
	waitFor(t, time.Second, "presence online", func() bool {
		s, via := h.presenceOf(id)
		return s == "online" && via == "mqtt"
	})
	var td map[string]any
	h.getJSON("/things/"+pathEscape(id), http.StatusOK, &td)
	if o, _ := td["lmos:origin"].(map[string]any); o["source"] != "mqtt" {
		t.Fatalf("origin %v", td["lmos:origin"])
	}

	// Kill the TCP connection without DISCONNECT: the will marks it offline.
	th.Conn.Close()
	waitFor(t, time.Second, "presence offline", func() bool {
		s, _ := h.presenceOf(id)
		return s == "offline"
	})

	var health struct {
		Components map[string]string `json:"components"`
	}
	h.getJSON("/healthz", http.StatusOK, &health)
	if health.Components["broker"] != "up" {
		t.Fatalf("healthz %v", health.Components)
	}
}

// requireMosquitto returns the paths of mosquitto_pub and mosquitto_sub,
// skipping only when interop tests are not demanded (LMOS_INTEROP unset).
func requireMosquitto(t *testing.T) (pub, sub string) {
	t.Helper()
	pub, err1 := exec.LookPath("mosquitto_pub")
	sub, err2 := exec.LookPath("mosquitto_sub")
	if err1 != nil || err2 != nil {
		if os.Getenv("LMOS_INTEROP") != "" {
			t.Fatal("mosquitto_pub/mosquitto_sub not found: install the Debian package mosquitto-clients (scripts/test-deps.sh does)")
		}
		t.Skip("mosquitto-clients not installed; set LMOS_INTEROP=1 to make this a failure")
	}
	return pub, sub
}

// mosq runs a mosquitto client against the hub's broker and returns its
// standard output.
func (h *testHub) mosq(bin string, args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(h.Main.MQTTAddr.String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: errb.Bytes()}
	}
	return out.String(), nil
}

func TestMQTTMosquittoInterop(t *testing.T) {
	pubBin, subBin := requireMosquitto(t)
	dir := t.TempDir()
	h := startHubIn(t, dir, nil)
	const id = "urn:uuid:5b0d6c1e-0000-4000-8000-0000000000bb"
	tid := lmos.TopicKey(id)
	creds := h.mqttDial(nil).join(id, makeTD(id, "Sensor"))
	th := h.mqttDial(&paho.Connect{CleanStart: true, Username: creds.Username, UsernameFlag: true, Password: []byte(creds.Password), PasswordFlag: true})
	propTopic := "lmos/v1/things/" + tid + "/properties/temp"
	th.pub(propTopic, []byte("21.5"), true)

	// A later mosquitto_sub reads the retained property.
	out, err := h.mosq(subBin, "-t", propTopic, "-C", "1", "-W", "5")
	if err != nil || strings.TrimSpace(out) != "21.5" {
		t.Fatalf("mosquitto_sub retained: %q %v", out, err)
	}

	// mosquitto_sub sees hub events.
	host, port, _ := net.SplitHostPort(h.Main.MQTTAddr.String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := exec.CommandContext(ctx, subBin, "-h", host, "-p", port, "-t", "lmos/v1/hub/events", "-C", "1", "-W", "8")
	var evOut bytes.Buffer
	events.Stdout = &evOut
	if err := events.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until its subscription is in place (it is the only other client).
	waitFor(t, 5*time.Second, "mosquitto_sub connected", func() bool { return h.Main.Broker.Clients() >= 3 })
	time.Sleep(50 * time.Millisecond)
	h.put("urn:http-thing", makeTD("urn:http-thing", "Via HTTP"))
	if err := events.Wait(); err != nil {
		t.Fatalf("mosquitto_sub events: %v (%q)", err, evOut.String())
	}
	var ev map[string]any
	if err := json.Unmarshal(evOut.Bytes(), &ev); err != nil || ev["type"] != "thing_created" || ev["id"] != "urn:http-thing" {
		t.Fatalf("event %q (%v)", evOut.String(), err)
	}

	// mosquitto_pub (anonymous) to a denied topic is not delivered.
	watcher := h.mqttDial(nil)
	watcher.sub("lmos/v1/things/+/status")
	if out, err := h.mosq(pubBin, "-t", "lmos/v1/things/"+tid+"/status", "-m", "offline", "-q", "1"); err != nil {
		t.Logf("mosquitto_pub: %q %v", out, err)
	}
	// Then an allowed publish, which must be the first thing it sees.
	th.pub("lmos/v1/things/"+tid+"/status", []byte("online"), false)
	if p := watcher.next("lmos/v1/things/" + tid + "/status"); string(p.Payload) != "online" {
		t.Fatalf("denied publish delivered: %q", p.Payload)
	}
	waitFor(t, time.Second, "presence online", func() bool { s, _ := h.presenceOf(id); return s == "online" })

	// A restart keeps retained messages.
	h.Close()
	h = startHubIn(t, dir, nil)
	out, err = h.mosq(subBin, "-t", propTopic, "-C", "1", "-W", "5")
	if err != nil || strings.TrimSpace(out) != "21.5" {
		t.Fatalf("retained after restart: %q %v", out, err)
	}
	out, err = h.mosq(subBin, "-t", "lmos/v1/hub/status", "-C", "1", "-W", "5")
	if err != nil || !strings.Contains(out, `"status":"online"`) || !strings.Contains(out, "http://"+h.Main.HTTPAddr.String()+"/.well-known/wot") {
		t.Fatalf("hub status after restart: %q %v", out, err)
	}
}

// mosquitto_sub, MQTT 3.1.1 and 5, reads events the hub fans out at QoS 0:
// the v5 one with their properties, the v3.1.1 one without, both in order.
func TestMQTTMosquittoFanOut(t *testing.T) {
	_, subBin := requireMosquitto(t)
	h := startHubIn(t, t.TempDir(), nil)
	const id = "urn:uuid:5b0d6c1e-0000-4000-8000-0000000000cc"
	topic := "lmos/v1/things/" + lmos.TopicKey(id) + "/events/alarm"
	th := h.mqttDial(thingConnect(h.mqttDial(nil).join(id, makeTD(id, "Alarm"))))
	host, port, _ := net.SplitHostPort(h.Main.MQTTAddr.String())
	type sub struct {
		cmd  *exec.Cmd
		out  bytes.Buffer
		done chan error
	}
	start := func(args ...string) *sub {
		s := &sub{done: make(chan error, 1)}
		s.cmd = exec.Command(subBin, append([]string{"-h", host, "-p", port, "-t", topic, "-C", "3", "-W", "10"}, args...)...)
		s.cmd.Stdout = &s.out
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { s.done <- s.cmd.Wait() }()
		t.Cleanup(func() { _ = s.cmd.Process.Kill() })
		return s
	}
	v311 := start("-V", "mqttv311", "-F", "%t %p")
	v5 := start("-V", "mqttv5", "-F", "%C|%P|%E|%p")
	// Publish numbered events until both have read three (their
	// subscriptions may start at different ones).
	exited := 0
	for n := 0; exited < 2; n++ {
		if n > 250 {
			t.Fatalf("mosquitto_sub did not read 3 events: v3.1.1 %q, v5 %q", v311.out.String(), v5.out.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := th.C.Publish(ctx, &paho.Publish{Topic: topic, QoS: 0, Payload: fmt.Appendf(nil, `{"n":%d}`, n), Properties: &paho.PublishProperties{
			ContentType:   "application/json",
			MessageExpiry: ptrTo(uint32(60)),
			User:          paho.UserProperties{{Key: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		for _, s := range []*sub{v311, v5} {
			select {
			case err := <-s.done:
				if err != nil {
					t.Fatalf("mosquitto_sub: %v (%q)", err, s.out.String())
				}
				exited++
			default:
			}
		}
	}
	check := func(name string, out string, line func(n int) string) {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			t.Fatalf("%s read %q", name, out)
		}
		var first int
		if _, err := fmt.Sscanf(lines[0][strings.LastIndex(lines[0], `{"n":`):], `{"n":%d}`, &first); err != nil {
			t.Fatalf("%s: %q: %v", name, lines[0], err)
		}
		for i, l := range lines {
			if want := line(first + i); l != want && !(name == "v5" && l == strings.Replace(want, "|60|", "|59|", 1)) {
				t.Fatalf("%s line %d = %q, want %q", name, i, l, want)
			}
		}
	}
	check("v3.1.1", v311.out.String(), func(n int) string { return fmt.Sprintf(`%s {"n":%d}`, topic, n) })
	check("v5", v5.out.String(), func(n int) string {
		return fmt.Sprintf(`application/json|traceparent:00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01|60|{"n":%d}`, n)
	})
}

func ptrTo[T any](v T) *T { return &v }
