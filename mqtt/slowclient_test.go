package mqtt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
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
// the Thing's credentials. The joiner reads nothing until its result has
// been queued, so its socket's buffers fill and the budget stays spent;
// a hook sees the budget at the moment the result was queued.
func TestJoinResultNotDroppedForFullBudget(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxQueuedBytes = 4 << 10; c.SlowClientTimeout = 20 * time.Second })
	owner, _ := joinOwner(t, e, "urn:noisy", nil)
	busy := lmos.ThingsPrefix + lmos.TopicKey("urn:noisy") + "/events/e"
	const id = "urn:joiner"
	key := lmos.TopicKey(id)
	resultTopic := lmos.ThingsPrefix + key + "/td/result"
	// Small socket buffers at both ends, so that the joiner's socket is
	// soon full and the hub's queue for it stays full. The joiner's is set
	// before it connects: a window once offered is never taken back. The
	// kernel would grow the hub's send buffer to megabytes (by the
	// machine's settings), which a flood must fill first; while it has
	// room, the hub's writer empties the queue.
	small := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	joiner := dialRawWith(t, small, e.addr, "joiner", true)
	joiner.subscribe(busy, 0)
	joiner.subscribe(resultTopic, 0)
	cl, ok := e.b.server.Clients.Get("joiner")
	if !ok {
		t.Fatal("the joiner is not connected")
	}
	oc := cl.Net.Conn.(*outConn)
	if err := oc.Conn.(*net.TCPConn).SetWriteBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	w := &resultWatch{topic: resultTopic, conn: oc, spent: make(chan bool, 1)}
	if err := e.b.server.AddHook(w, nil); err != nil {
		t.Fatal(err)
	}
	// The flood goes on until the result has been queued.
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
	stopFlood := sync.OnceFunc(func() {
		close(stop)
		<-flooded
	})
	defer stopFlood()
	// The socket is full once deliveries are refused while nothing more
	// is written for longer than the joiner's kernel may delay an
	// acknowledgement (200 ms); with the joiner not reading, it stays so.
	written, drops, since := oc.written.Load(), e.b.Dropped("queue_full"), time.Now()
	testwait.Eventually(t, 10*time.Second, "the joiner's socket full", func() bool {
		if n := oc.written.Load(); n != written {
			written, drops, since = n, e.b.Dropped("queue_full"), time.Now()
			return false
		}
		return e.b.Dropped("queue_full") >= drops+16 && time.Since(since) > 300*time.Millisecond
	})
	// The joiner publishes its TD (QoS 0) while its budget is spent.
	tdTopic := lmos.ThingsPrefix + key + "/td"
	body := append([]byte{0, byte(len(tdTopic))}, tdTopic...)
	body = append(append(body, 0), tdgen.MakeTD(id, "J")...) // no properties
	if _, err := joiner.conn.Write(append(appendVarInt([]byte{0x30}, len(body)), body...)); err != nil {
		t.Fatal(err)
	}
	select {
	case spent := <-w.spent:
		if !spent {
			t.Fatal("the joiner's QoS 0 budget had room when its result was queued: the test proves nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no join result was published")
	}
	stopFlood()
	// Now read: the result with its credentials is in the stream, behind
	// the few KiB of flood the small buffers and the budget hold. Every
	// packet must be a PUBLISH; read waits at most 5 s for each.
	t.Log("reading until the join result")
	for {
		p := joiner.next()
		if p.topic != resultTopic {
			continue
		}
		var res lmos.JoinResult
		if err := json.Unmarshal(p.payload, &res); err != nil {
			t.Fatalf("join result %q: %v", p.payload, err)
		}
		if res.Status != lmos.JoinAccepted || res.Credentials == nil {
			t.Fatalf("join result %+v, want accepted with credentials", res)
		}
		hash, err := e.db.CredentialHash(id)
		if err != nil || hash != hub.HashToken(res.Credentials.Password) {
			t.Fatalf("the credentials received are not the Thing's (stored hash %q, %v)", hash, err)
		}
		return
	}
}

// resultWatch is a mochi hook that sees the hub publish a join result
// (after the fan-out has queued it) and reports whether conn's QoS 0
// budget was spent then: whether a QoS 0 delivery as large as the result
// would have been refused.
type resultWatch struct {
	mochi.HookBase
	topic string
	conn  *outConn
	spent chan bool
}

func (w *resultWatch) ID() string { return "test-result-watch" }

func (w *resultWatch) Provides(b byte) bool { return b == mochi.OnPublished }

func (w *resultWatch) OnPublished(cl *mochi.Client, pk packets.Packet) {
	if !cl.Net.Inline || pk.TopicName != w.topic {
		return
	}
	n := len(appendPublish(nil, &pk, true, false, 0, 0, nil, 0))
	c := w.conn
	c.mu.Lock()
	waiting := c.q0 + c.held0
	c.mu.Unlock()
	select {
	case w.spent <- waiting > 0 && waiting+n > c.budget:
	default:
	}
}

// floodPayload makes each flood delivery exactly 1 KiB on the wire (fixed
// header 3, topic 2+33, properties 1), so four of them fill the 4 KiB
// budget to the byte and no join result fits beside them.
const floodPayload = 1024 - 39
