package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// An agent over mqtts:// writes from several goroutines at once: its
// handlers' results and Emits, paho's acknowledgements and its first
// PINGREQ, which paho sends the moment the CONNACK is in, beside the
// agent's first SUBSCRIBE. paho writes a packet as several buffers, one
// Write each, and a tls.Conn does not keep them together: another
// goroutine's packet could land inside one, the hub read a malformed
// packet ("malformed packet: topic") and dropped the connection. Emits
// from many goroutines must all go through on the one connection.
func TestConcurrentWritesOverTLS(t *testing.T) {
	hb := hubtest.Start(t, func(c *app.Config) { c.TLS.Enabled = true })
	const id = "urn:test:tls-writes"
	a, err := Connect(ctxT(t, 20*time.Second), Options{
		URL: "mqtts://" + hb.Main.MQTTSAddr.String(), TLSFingerprint: hb.Main.TLS.Fingerprint(),
		TD: testTD(id), Logger: testLogger(t), Timeout: 20 * time.Second, MaxBackoff: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	l := mqttOf(a)
	l.mu.Lock()
	cli := l.cli
	l.mu.Unlock()

	const writers, each = 16, 200
	payload := strings.Repeat("x", 300) // more than one buffer's worth of small pieces
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := a.Emit("alarm", map[string]any{"w": w, "i": i, "pad": payload}); err != nil {
					errs <- fmt.Errorf("emit %d/%d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	l.mu.Lock()
	same := l.cli == cli
	l.mu.Unlock()
	if !same {
		t.Error("the agent lost its connection to the hub while emitting (and reconnected)")
	}
}
