// Command mqttload is the MQTT fan-out load generator of the benchmarks
// (cmd/lmos-hub/mqtt_bench_test.go, BenchmarkMQTTFanout50). It runs in its
// own process, so that the broker under test — the hub, a bare mochi broker
// or mosquitto — never shares a Go runtime (scheduler, GC) with the clients
// that load it.
//
// It connects -subs MQTT 5 subscribers (paho.golang) to -topic at QoS 0,
// then one publisher sends -n messages of -size bytes to it at QoS 0 and
// prints one JSON line:
//
//	{"deliveries":…, "expected":…, "seconds":…, "perSecond":…}
//
// seconds runs from the first publish until the last subscriber received
// the last message. The publisher stays at most -window messages ahead of
// the slowest subscriber, so no broker drops QoS 0 messages for a full
// outbound queue (the hub queues 128 per client) and every broker is
// measured at the same offered load. A run that makes no progress for 5 s
// stops and reports what was delivered.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

type result struct {
	Deliveries int64   `json:"deliveries"`
	Expected   int64   `json:"expected"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"perSecond"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "broker address")
	topic := flag.String("topic", "bench/fanout", "topic")
	subs := flag.Int("subs", 50, "subscribers")
	n := flag.Int("n", 10000, "messages to publish")
	size := flag.Int("size", 100, "payload bytes")
	window := flag.Int("window", 100, "most messages the publisher runs ahead of the slowest subscriber")
	user := flag.String("user", "", "publisher username (empty: anonymous)")
	pass := flag.String("pass", "", "publisher password")
	flag.Parse()
	if *size < 8 {
		*size = 8 // room for the sequence number
	}
	res, err := run(*addr, *topic, *subs, *n, *size, *window, *user, *pass)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mqttload:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
}

// connect opens an MQTT 5 clean session; onMsg (may be nil) sees every
// message received.
func connect(addr, id, user, pass string, onMsg func(*paho.Publish)) (*paho.Client, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg := paho.ClientConfig{Conn: conn}
	if onMsg != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			onMsg(pr.Packet)
			return true, nil
		}}
	}
	c := paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 60}
	if user != "" {
		cp.Username, cp.UsernameFlag = user, true
		cp.Password, cp.PasswordFlag = []byte(pass), true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect %s: %w", id, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("connect %s: reason %d", id, ca.ReasonCode)
	}
	return c, nil
}

func run(addr, topic string, subs, n, size, window int, user, pass string) (result, error) {
	pid := os.Getpid()
	counts := make([]atomic.Int64, subs)
	progress := make(chan struct{}, 1)
	var total atomic.Int64
	var lastNano atomic.Int64 // time of the last delivery
	var clients []*paho.Client
	defer func() {
		for _, c := range clients {
			_ = c.Disconnect(&paho.Disconnect{})
		}
	}()
	for i := range subs {
		cnt := &counts[i]
		c, err := connect(addr, fmt.Sprintf("load-%d-sub-%d", pid, i), "", "", func(p *paho.Publish) {
			cnt.Add(1)
			total.Add(1)
			lastNano.Store(time.Now().UnixNano())
			select {
			case progress <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return result{}, err
		}
		clients = append(clients, c)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 0}}})
		cancel()
		if err != nil {
			return result{}, fmt.Errorf("subscribe: %w", err)
		}
		if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
			return result{}, fmt.Errorf("subscribe %s refused: %v", topic, sa.Reasons)
		}
	}
	pub, err := connect(addr, fmt.Sprintf("load-%d-pub", pid), user, pass, nil)
	if err != nil {
		return result{}, err
	}
	clients = append(clients, pub)

	slowest := func() int64 {
		m := counts[0].Load()
		for i := 1; i < len(counts); i++ {
			m = min(m, counts[i].Load())
		}
		return m
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	ctx := context.Background()
	start := time.Now()
	stalled := func() bool { return time.Since(time.Unix(0, max(lastNano.Load(), start.UnixNano()))) > 5*time.Second }
	for i := range n {
		for int64(i)-slowest() >= int64(window) {
			select {
			case <-progress:
			case <-time.After(100 * time.Millisecond):
				if stalled() {
					return finish(total.Load(), int64(n)*int64(subs), start, lastNano.Load()), nil
				}
			}
		}
		binary.BigEndian.PutUint64(payload, uint64(i))
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 0, Payload: payload}); err != nil {
			return result{}, fmt.Errorf("publish: %w", err)
		}
	}
	want := int64(n) * int64(subs)
	for total.Load() < want {
		select {
		case <-progress:
		case <-time.After(100 * time.Millisecond):
			if stalled() {
				return finish(total.Load(), want, start, lastNano.Load()), nil
			}
		}
	}
	return finish(total.Load(), want, start, lastNano.Load()), nil
}

func finish(got, want int64, start time.Time, last int64) result {
	secs := time.Unix(0, last).Sub(start).Seconds()
	r := result{Deliveries: got, Expected: want, Seconds: secs}
	if secs > 0 {
		r.PerSecond = float64(got) / secs
	}
	return r
}
