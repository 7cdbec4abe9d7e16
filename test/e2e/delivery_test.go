package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// /metrics counts the MQTT deliveries dropped, by reason, and the clients
// cut off for being too slow: here a subscriber that stops reading, with
// mqtt.slowClientTimeout and mqtt.maxQueuedBytes scaled down.
func TestMQTTSlowClientMetrics(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.MQTT.SlowClientTimeout = Duration(300 * time.Millisecond)
		c.MQTT.MaxQueuedBytes = 4096
	})
	const id = "urn:metrics-thing"
	creds := h.mqttDial(nil).join(id, makeTD(id, "Metrics"))
	th := h.mqttDial(&paho.Connect{CleanStart: true, Username: creds.Username, UsernameFlag: true, Password: []byte(creds.Password), PasswordFlag: true})
	topic := "lmos/v1/things/" + lmos.TopicKey(id) + "/events/e"

	// A raw MQTT 3.1.1 subscriber that reads its SUBACK and nothing more.
	conn, err := net.Dial("tcp", h.Main.MQTTAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	connect := append([]byte{0x10, 10 + 2 + 5, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60, 0, 5}, "stuck"...)
	sub := append(append([]byte{0x82, byte(2 + 2 + len(topic) + 1), 0, 1, 0, byte(len(topic))}, topic...), 0)
	if _, err := conn.Write(append(connect, sub...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	ack := make([]byte, 4+5) // CONNACK, SUBACK
	if _, err := io.ReadFull(r, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 || ack[4] != 0x90 || ack[8] != 0 {
		t.Fatalf("CONNACK/SUBACK % x %v", ack, err)
	}

	payload := bytes.Repeat([]byte{'x'}, 32<<10)
	waitFor(t, 10*time.Second, "the stuck subscriber cut off", func() bool {
		th.pub(topic, payload, false)
		return h.Main.Broker.SlowDisconnects() > 0
	})
	resp, body := h.do(http.MethodGet, "/metrics", "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics %d", resp.StatusCode)
	}
	value := func(series string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no %s in /metrics:\n%s", series, body)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	if v := value("lmos_mqtt_slow_disconnects_total"); v != 1 {
		t.Fatalf("slow disconnects %d, want 1", v)
	}
	if v := value(`lmos_mqtt_dropped_total{reason="slow_client"}`); v != 1 {
		t.Fatalf("slow_client drops %d, want 1", v)
	}
	if v := value(`lmos_mqtt_dropped_total{reason="queue_full"}`); v < 1 {
		t.Fatalf("queue_full drops %d, want some", v)
	}
	for _, family := range []string{"lmos_mqtt_dropped_total", "lmos_mqtt_slow_disconnects_total", "lmos_mqtt_clients", "lmos_mqtt_inflight"} {
		for _, kind := range []string{"HELP", "TYPE"} {
			if !bytes.Contains(body, fmt.Appendf(nil, "# %s %s ", kind, family)) {
				t.Fatalf("no %s for %s", kind, family)
			}
		}
	}
}
