package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMQTTConnectTimeout is issue 12's attack 6a scaled down: 200 plain
// TCP connections to the MQTT port, half of which send nothing and half
// half a CONNECT, with mqtt.connectTimeout at 300 ms. Every one is closed
// by the hub and counted (mqtt.connectTimeout), as is a WebSocket on /mqtt
// that sends nothing; goroutines and heap come
// back to where they were; a subscriber (mosquitto_sub) connected before
// stays connected past the timeout and gets a message mosquitto_pub
// publishes meanwhile.
func TestMQTTConnectTimeout(t *testing.T) {
	sub := mosquittoTool(t, "mosquitto_sub")
	pub := mosquittoTool(t, "mosquitto_pub")
	const timeout = 300 * time.Millisecond
	h := startHub(t, func(c *Config) { c.MQTT.ConnectTimeout = Duration(timeout) })
	addr := h.Main.MQTTAddr.String()
	host, port, _ := strings.Cut(addr, ":")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keeper := exec.CommandContext(ctx, sub, "-h", host, "-p", port, "-V", "mqttv5", "-i", "keeper", "-k", "60",
		"-t", "lmos/v1/clients/keeper/#", "-C", "1")
	var out strings.Builder
	keeper.Stdout, keeper.Stderr = &out, &out
	if err := keeper.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "mosquitto_sub subscribed", func() bool {
		return h.Main.Broker.Subscribers("lmos/v1/clients/keeper/x") == 1
	})

	baseG, baseHeap := settle()
	// An MQTT 5 CONNECT cut after its variable header's start.
	half := []byte{0x10, 0x20, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x05, 0x02, 0x00}
	const n = 200
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			if _, err := c.Write(half); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
	}
	// Each is closed by the hub: a read ends with EOF (or a reset), not
	// with the test's own deadline.
	deadline := time.Now().Add(timeout + 5*time.Second)
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		_, err := io.ReadAll(c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	if open > 0 {
		t.Fatalf("%d of %d connections without a CONNECT still open %v after the connect timeout", open, n, 5*time.Second)
	}
	// Counted once mochi's handling of the connection has returned, just
	// after the close.
	waitFor(t, 5*time.Second, "every connection counted as mqtt.connectTimeout", func() bool {
		return h.Main.Broker.Refused("mqtt.connectTimeout") == n
	})

	// The /mqtt WebSocket door has the same timeout: a WebSocket that
	// sends no CONNECT is closed and counted.
	ws, err := h.wsDialErr("/mqtt", "mqtt", nil)
	if err != nil {
		t.Fatalf("dial /mqtt: %v", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_, _, err = ws.Read(rctx)
	rcancel()
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("/mqtt without a CONNECT: %v, want closed by the hub", err)
	}
	waitFor(t, 5*time.Second, "the WebSocket counted as mqtt.connectTimeout", func() bool {
		return h.Main.Broker.Refused("mqtt.connectTimeout") == n+1
	})

	// The subscriber connected before is still served.
	if b, err := exec.CommandContext(ctx, pub, "-h", host, "-p", port, "-V", "mqttv5", "-t", "lmos/v1/clients/keeper/x", "-m", "still here").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, b)
	}
	if err := keeper.Wait(); err != nil || strings.TrimSpace(out.String()) != "still here" {
		t.Fatalf("mosquitto_sub: %v %q", err, out.String())
	}

	var g int
	var heap uint64
	waitFor(t, 5*time.Second, "goroutines back to the baseline", func() bool {
		g, heap = settle()
		return g <= baseG+5
	})
	if heap > baseHeap+4<<20 {
		t.Errorf("heap %d KiB after, %d KiB before", heap>>10, baseHeap>>10)
	}
	t.Logf("goroutines %d → %d, heap %d → %d KiB", baseG, g, baseHeap>>10, heap>>10)
}

// settle collects garbage and returns the goroutine count and live heap.
func settle() (int, uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}
