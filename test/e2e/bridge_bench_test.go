package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// BenchmarkBridge measures the MQTT bridge (PROTOCOL §9) against
// publishing to mosquitto directly, every side its own process: Debian's
// mosquitto (set_tcp_nodelay) is the upstream, the hub (the built binary)
// bridges bench/# out to it at QoS 1, and test/kit/mqttload publishes
// either to mosquitto ("direct") or to the hub ("bridged") while its one
// subscriber reads from mosquitto. Three interleaved rounds per figure:
//
//   - rate: 10,000 messages of 100 bytes at QoS 1 (and at QoS 0), the
//     publisher at most 100 ahead of the subscriber: messages/s from the
//     first publish to the last delivery;
//   - latency: 2,000 messages at QoS 1, each published once the previous
//     one arrived (-window 1): µs from a publish to its delivery, and
//     what the bridge adds (bridged − direct); also the CPU time of the
//     hub and of mosquitto per bridged message.
//
// Figures, not assertions: docs/PERFORMANCE.md "Bridge".
func BenchmarkBridge(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	mosqAddr, mosqPID := startMosquitto(b, "set_tcp_nodelay true")
	load := buildTool(b, "../kit/mqttload", "mqttload")
	dir := b.TempDir()
	conf := filepath.Join(dir, "config.yaml")
	yml := "bridge:\n  url: mqtt://" + mosqAddr + "\n  localAccess: {publish: operate}\n" +
		"  topics:\n    - {pattern: \"bench/#\", direction: out, qos: 1}\n"
	if err := os.WriteFile(conf, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	hub := startHubBinary(b, buildTool(b, lmosHubPkg, "lmos-hub"), filepath.Join(dir, "data"), "--config", conf)
	awaitBridge(b, hub.mqttAddr)

	run := func(name string, pubAddr string, pid int, qos, n, window int) sideTotals {
		return mqttLoad(b, load, name, pid, "-addr", pubAddr, "-subaddr", mosqAddr, "-topic", "bench/bridge",
			"-qos", strconv.Itoa(qos), "-pubs", "1", "-subs", "1", "-n", strconv.Itoa(n), "-size", "100",
			"-window", strconv.Itoa(window))
	}
	type pair struct{ direct, bridged sideTotals }
	var q1, q0, lat pair
	var mosqCPU time.Duration
	for b.Loop() {
		for range 3 {
			q1.direct.add(run("mosquitto", mosqAddr, mosqPID, 1, 10000, 100))
			q1.bridged.add(run("hub", hub.mqttAddr, hub.pid, 1, 10000, 100))
			q0.direct.add(run("mosquitto", mosqAddr, mosqPID, 0, 10000, 100))
			q0.bridged.add(run("hub", hub.mqttAddr, hub.pid, 0, 10000, 100))
			lat.direct.add(run("mosquitto", mosqAddr, mosqPID, 1, 2000, 1))
			cpu0 := procCPU(b, mosqPID)
			lat.bridged.add(run("hub", hub.mqttAddr, hub.pid, 1, 2000, 1))
			mosqCPU += procCPU(b, mosqPID) - cpu0
		}
	}
	micros := func(t sideTotals) float64 { return t.secs * 1e6 / float64(t.deliveries) }
	b.ReportMetric(q1.direct.rate(), "direct-qos1-msg/s")
	b.ReportMetric(q1.bridged.rate(), "bridged-qos1-msg/s")
	b.ReportMetric(q0.direct.rate(), "direct-qos0-msg/s")
	b.ReportMetric(q0.bridged.rate(), "bridged-qos0-msg/s")
	b.ReportMetric(micros(lat.direct), "direct-µs/msg")
	b.ReportMetric(micros(lat.bridged), "bridged-µs/msg")
	b.ReportMetric(micros(lat.bridged)-micros(lat.direct), "added-µs/msg")
	b.ReportMetric(q1.bridged.microsPerDelivery(), "hub-cpu-µs/bridged-msg")
	b.ReportMetric(mosqCPU.Seconds()*1e6/float64(lat.bridged.deliveries), "mosquitto-cpu-µs/bridged-msg")
	lost := q1.direct.lost + q1.bridged.lost + lat.direct.lost + lat.bridged.lost
	b.ReportMetric(float64(lost), "qos1-lost")
	b.ReportMetric(float64(q0.direct.lost+q0.bridged.lost), "qos0-lost")
}

// awaitBridge waits until the hub at addr says its bridge is connected
// (its retained state topic).
func awaitBridge(b *testing.B, addr string) {
	b.Helper()
	up := make(chan struct{}, 1)
	c := benchMQTT(b, addr, &paho.Connect{ClientID: "bench-bridge-state", CleanStart: true, KeepAlive: 30}, func(p *paho.Publish) {
		if string(p.Payload) == "1" {
			select {
			case up <- struct{}{}:
			default:
			}
		}
	})
	benchSubscribe(b, c, "lmos/v1/hub/bridge/upstream/state", 0)
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		b.Fatal("the hub's bridge did not connect within 30 s")
	}
}
