package mqtt

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/tdgen"
	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// A client that subscribes to every Thing's description and then reads
// nothing holds the retained TDs queued for it (beyond its QoS 0 budget)
// only until a write to it has waited the slow-client timeout: then it is
// cut off and counted, and what was queued is freed.
func TestNonReadingWildcardSubscriberCutOff(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SlowClientTimeout = 300 * time.Millisecond })
	for i := range 40 {
		id := fmt.Sprintf("urn:big:%d", i)
		if res := mustDial(t, e.addr, nil).join(lmos.TopicKey(id), bigTD(id, 4000), ""); res.Status != "accepted" {
			t.Fatalf("join %s: %+v", id, res)
		}
	}
	before := e.b.SlowDisconnects()
	conn := rawConnect5(t, e.addr, "hoarder", true)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	subscribeRaw(t, conn, 1, lmos.ThingsPrefix+"+/td")
	// 8 MB queued, more than the kernel buffers; the client never reads.
	testwait.Eventually(t, 10*time.Second, "the hoarder cut off", func() bool { return e.b.SlowDisconnects() > before })
	testwait.Eventually(t, 5*time.Second, "the hoarder gone", func() bool {
		cl, ok := e.b.server.Clients.Get("hoarder")
		return !ok || cl.Closed()
	})
	// Others are served.
	c := mustDial(t, e.addr, nil)
	c.mustSub(lmos.ThingsPrefix + "urn:big:0/td")
	raw, _ := e.reg.Raw("urn:big:0")
	if p := c.next(lmos.ThingsPrefix + "urn:big:0/td"); !bytes.Equal(p.Payload, raw) {
		t.Fatalf("retained TD of %d bytes, want the registry's %d", len(p.Payload), len(raw))
	}
}

// A join result is queued even when the joining client's QoS 0 budget is
// spent (a flood on a topic it subscribes to): it carries the only copy of
// the Thing's credentials.
func TestJoinResultNotDroppedForFullBudget(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxQueuedBytes = 4 << 10; c.SlowClientTimeout = 20 * time.Second })
	owner, _ := joinOwner(t, e, "urn:noisy", nil)
	busy := lmos.ThingsPrefix + lmos.TopicKey("urn:noisy") + "/events/e"
	const id = "urn:joiner"
	key := lmos.TopicKey(id)
	conn := rawConnect5(t, e.addr, "joiner", true)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	start := time.Now()
	subscribeRaw(t, conn, 1, busy)
	subscribeRaw(t, conn, 2, lmos.ThingsPrefix+key+"/td/result")
	testwait.Eventually(t, 5*time.Second, "subscribed", func() bool { return e.b.Subscribers(lmos.ThingsPrefix+key+"/td/result") == 1 })
	// The flood goes on until the joiner is registered, keeping its
	// budget spent when the result is published.
	drops := e.b.Dropped("queue_full")
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for i := 0; i < 200_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := owner.pub(busy, make([]byte, floodPayload), 0, false, ""); err != nil {
				return
			}
		}
	}()
	testwait.Eventually(t, 10*time.Second, "the joiner's budget spent", func() bool { return e.b.Dropped("queue_full") > drops })
	t.Logf("budget full after %v", time.Since(start))
	// The joiner publishes its TD (QoS 0) while its budget is spent.
	td := tdgen.MakeTD(id, "J")
	topic := lmos.ThingsPrefix + key + "/td"
	vh := append([]byte{0, byte(len(topic))}, topic...)
	vh = append(vh, 0) // no properties
	pkt := append(vh, td...)
	if _, err := conn.Write(append([]byte{0x30, byte(len(pkt) | 0x80), byte(len(pkt) >> 7)}, pkt...)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "registered", func() bool { _, err := e.reg.Get(id); return err == nil })
	dropsAtJoin := e.b.Dropped("queue_full")
	time.Sleep(20 * time.Millisecond) // the flood keeps the budget spent past the result
	close(stop)
	<-flooded
	if e.b.Dropped("queue_full") == dropsAtJoin {
		t.Fatal("the flood did not keep the joiner's budget spent around its result")
	}
	t.Logf("registered after %v", time.Since(start))
	// Now read: the result with its credentials is in the stream.
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains(got.Bytes(), []byte(`"credentials"`)) && time.Now().Before(deadline) {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		got.Write(buf[:n])
		if err != nil && !errorsIsTimeout(err) {
			break
		}
	}
	if !bytes.Contains(got.Bytes(), []byte(`"credentials"`)) {
		t.Fatalf("the join result with credentials never reached the joiner (%d bytes read)", got.Len())
	}
}

// floodPayload makes each flood delivery exactly 1 KiB on the wire (fixed
// header 3, topic 2+33, properties 1), so four of them fill the 4 KiB
// budget to the byte and no join result fits beside them.
const floodPayload = 1024 - 39

func errorsIsTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
