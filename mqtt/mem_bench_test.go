package mqtt

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/test/kit/memprof"
)

// BenchmarkIdleClientMemory connects 1,000 idle MQTT 5 clients to the broker
// alone (newEnv), each subscribed to its own reply inbox, and reports what
// one costs the broker after two collections: heap bytes, goroutine stack
// bytes and goroutines. The clients are raw sockets of this process with no
// goroutine, so nearly all of the difference is the broker's (each client
// socket adds its netFD, ~0.3 KB of heap). LMOS_MEMPROFILE=path also writes
// the heap profile with the clients connected.
func BenchmarkIdleClientMemory(b *testing.B) {
	const clients = 1000
	memprof.SampleAll(b)
	for b.Loop() {
		e := newEnv(b, nil)
		before := settledMem()
		conns := make([]net.Conn, 0, clients)
		for i := range clients {
			c, err := idleClient(e.addr, fmt.Sprintf("idle-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		after := settledMem()
		memprof.Write(b)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/clients, "heap-B/client")
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/clients, "stack-B/client")
		b.ReportMetric(float64(after.goroutines-before.goroutines)/clients, "goroutines/client")
		if g := after.goroutines - before.goroutines; g > 0 {
			b.ReportMetric(float64(after.StackInuse-before.StackInuse)/float64(g), "stack-B/goroutine")
		}
		b.ReportMetric(float64(after.rssKB-before.rssKB)*1024/clients, "RSS-B/client")
		b.ReportMetric(float64((after.HeapAlloc+after.StackInuse)-(before.HeapAlloc+before.StackInuse))/clients, "B/client")
		for _, c := range conns {
			c.Close()
		}
		e.stop()
	}
}

type memFigures struct {
	runtime.MemStats
	goroutines int
	rssKB      int // VmRSS, 0 if unknown
}

// settledMem collects until the goroutine stacks stop shrinking (each
// collection halves a stack at most once, so a stack the handshake grew to
// 32 KB needs three to reach 8 KB and a fourth for 4 KB; at most six) and
// reads the runtime's figures. An idle process gets there too: the
// runtime collects at least every two minutes. The freed pages go back to
// the OS as the runtime's background scavenger returns them, as in the
// hub: VmRSS may count some of them still.
func settledMem() memFigures {
	var m memFigures
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m.MemStats)
	for range 4 {
		last := m.StackInuse
		runtime.GC()
		runtime.ReadMemStats(&m.MemStats)
		if m.StackInuse >= last {
			break
		}
	}
	m.goroutines = runtime.NumGoroutine()
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				m.rssKB, _ = strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			}
		}
	}
	return m
}

// idleClient connects an MQTT 5 client (keepalive 60 s) that subscribes to
// its own reply inbox at QoS 1 and waits for CONNACK and SUBACK.
func idleClient(addr, id string) (net.Conn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 60, 0, 0, byte(len(id))}
	vh = append(vh, id...)
	topic := "lmos/v1/clients/" + id + "/#"
	sub := []byte{0, 1, 0, byte(len(topic) >> 8), byte(len(topic))}
	sub = append(append(sub, topic...), 1)
	out := append([]byte{0x10, byte(len(vh))}, vh...)
	out = append(append(out, 0x82, byte(len(sub))), sub...)
	if _, err := conn.Write(out); err != nil {
		conn.Close()
		return nil, err
	}
	r := bufio.NewReader(conn)
	for _, want := range []byte{0x20, 0x90} {
		kind, err := r.ReadByte()
		if err != nil || kind != want {
			conn.Close()
			return nil, fmt.Errorf("client %s: packet %#x (want %#x): %v", id, kind, want, err)
		}
		n, shift := 0, 0
		for {
			c, err := r.ReadByte()
			if err != nil {
				conn.Close()
				return nil, err
			}
			n |= int(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				break
			}
		}
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}
