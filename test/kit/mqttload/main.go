// Command mqttload is the MQTT fan-out load generator of the benchmarks
// (test/e2e/mqtt_bench_test.go, BenchmarkMQTTFanout50). It runs in its
// own process, so that the broker under test — the hub, a bare mochi broker
// or mosquitto — never shares a Go runtime (scheduler, GC) with the clients
// that load it.
//
// It connects -subs MQTT 5 subscribers (to -subaddr when given: a bridge
// between two brokers is measured so) (paho.golang; anonymous, or each a
// Thing with its credentials from -subcreds) to -topic at -qos,
// then -pubs publishers send -n messages of -size bytes in all to it at
// -qos (each an equal share; QoS 1/2 pipelined up to the broker's Receive
// Maximum) and prints one JSON line:
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
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/mqttdial"
	"github.com/eclipse/paho.golang/paho"
)

// credentials are a subscriber's username and password (-subcreds):
// group channels are open to their members only (issue 15).
type credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type result struct {
	Deliveries int64   `json:"deliveries"`
	Expected   int64   `json:"expected"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"perSecond"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "broker address")
	subAddr := flag.String("subaddr", "", "the subscribers' broker address (empty: -addr); another broker measures a bridge between them")
	topic := flag.String("topic", "bench/fanout", "topic")
	subs := flag.Int("subs", 50, "subscribers")
	pubs := flag.Int("pubs", 1, "publishers")
	qos := flag.Int("qos", 0, "QoS of the subscriptions and the publishes (0, 1 or 2)")
	n := flag.Int("n", 10000, "messages to publish")
	size := flag.Int("size", 100, "payload bytes")
	window := flag.Int("window", 100, "most messages the publisher runs ahead of the slowest subscriber")
	user := flag.String("user", "", "publisher username (empty: anonymous)")
	pass := flag.String("pass", "", "publisher password")
	subCreds := flag.String("subcreds", "", `JSON file of [{"username","password"}]: subscriber i connects with entry i (modulo their number); empty: anonymous`)
	flag.Parse()
	if *size < 8 {
		*size = 8 // room for the sequence number
	}
	if *qos < 0 || *qos > 2 || *pubs < 1 || *subs < 1 {
		fmt.Fprintln(os.Stderr, "mqttload: -qos must be 0, 1 or 2; -pubs and -subs at least 1")
		os.Exit(2)
	}
	var creds []credentials
	if *subCreds != "" {
		data, err := os.ReadFile(*subCreds)
		if err == nil {
			err = json.Unmarshal(data, &creds)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "mqttload: -subcreds:", err)
			os.Exit(2)
		}
	}
	if *subAddr == "" {
		*subAddr = *addr
	}
	res, err := run(*addr, *subAddr, *topic, *subs, *pubs, byte(*qos), *n, *size, *window, *user, *pass, creds)
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
	cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 60}
	if user != "" {
		cp.Username, cp.UsernameFlag = user, true
		cp.Password, cp.PasswordFlag = []byte(pass), true
	}
	return mqttdial.Dial(addr, cp, onMsg)
}

// run connects the subscribers and the publishers, then measures.
func run(addr, subAddr, topic string, subs, pubs int, qos byte, n, size, window int, user, pass string, creds []credentials) (result, error) {
	l := &load{counts: make([]atomic.Int64, subs), progress: make(chan struct{}, 1), qos: qos, creds: creds}
	defer l.disconnect()
	if err := l.subscribe(subAddr, topic); err != nil {
		return result{}, err
	}
	var all []*paho.Client
	for i := range pubs {
		pub, err := connect(addr, fmt.Sprintf("load-%d-pub-%d", os.Getpid(), i), user, pass, nil)
		if err != nil {
			return result{}, err
		}
		l.clients = append(l.clients, pub)
		all = append(all, pub)
	}
	return l.measure(all, topic, n, size, window)
}

// load is one run: its clients and what the subscribers received.
type load struct {
	counts   []atomic.Int64 // per subscriber
	progress chan struct{}  // signalled (without blocking) on a delivery
	total    atomic.Int64
	lastNano atomic.Int64 // time of the last delivery
	clients  []*paho.Client
	start    time.Time
	qos      byte
	// published counts the publishes handed to the clients, over all
	// publishers; stalled is set when a run made no progress for 5 s.
	published atomic.Int64
	stalled   atomic.Bool
	// creds are the subscribers' credentials (none: anonymous).
	creds []credentials
}

// disconnect closes every client connected so far.
func (l *load) disconnect() {
	for _, c := range l.clients {
		_ = c.Disconnect(&paho.Disconnect{})
	}
}

// subscribe connects one subscriber per count and subscribes it to topic.
func (l *load) subscribe(addr, topic string) error {
	pid := os.Getpid()
	for i := range l.counts {
		cnt := &l.counts[i]
		var cr credentials
		if len(l.creds) > 0 {
			cr = l.creds[i%len(l.creds)]
		}
		c, err := connect(addr, fmt.Sprintf("load-%d-sub-%d", pid, i), cr.Username, cr.Password, func(p *paho.Publish) {
			cnt.Add(1)
			l.total.Add(1)
			l.lastNano.Store(time.Now().UnixNano())
			select {
			case l.progress <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return err
		}
		l.clients = append(l.clients, c)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: l.qos}}})
		cancel()
		if err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
			return fmt.Errorf("subscribe %s refused: %v", topic, sa.Reasons)
		}
	}
	return nil
}

// measure has the publishers send n messages of size bytes in all (each
// an equal share, the first the remainder), at most window ahead of the
// slowest subscriber, and waits until every subscriber has them all or the
// run stalls.
func (l *load) measure(pubs []*paho.Client, topic string, n, size, window int) (result, error) {
	want := int64(n) * int64(len(l.counts))
	opts := paho.PublishOptions{Method: paho.PublishMethod_AsyncSend}
	errs := make(chan error, len(pubs))
	l.start = time.Now()
	for i, pub := range pubs {
		share := n / len(pubs)
		if i == 0 {
			share += n % len(pubs)
		}
		go func() { errs <- l.publish(pub, topic, share, size, window, opts) }()
	}
	for range pubs {
		if err := <-errs; err != nil {
			return result{}, err
		}
	}
	for l.total.Load() < want && !l.stalled.Load() {
		if !l.await() {
			break
		}
	}
	return l.result(want), nil
}

// publish sends count messages from pub, each numbered, keeping the
// messages published by all within window of the slowest subscriber.
func (l *load) publish(pub *paho.Client, topic string, count, size, window int, opts paho.PublishOptions) error {
	ctx := context.Background()
	for range count {
		for l.published.Load()-l.slowest() >= int64(window) {
			if l.stalled.Load() || !l.await() {
				l.stalled.Store(true)
				return nil
			}
		}
		seq := l.published.Add(1)
		// A buffer per message: paho's session keeps the QoS 1/2 packet,
		// payload included, until it is acknowledged.
		payload := bytes.Repeat([]byte{'x'}, size)
		binary.BigEndian.PutUint64(payload, uint64(seq))
		if _, err := pub.PublishWithOptions(ctx, &paho.Publish{Topic: topic, QoS: l.qos, Payload: payload}, opts); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// slowest is the count of the subscriber that received the fewest.
func (l *load) slowest() int64 {
	m := l.counts[0].Load()
	for i := 1; i < len(l.counts); i++ {
		m = min(m, l.counts[i].Load())
	}
	return m
}

// await waits for a delivery, or 100 ms; false when nothing was delivered
// for 5 s since the last delivery (or the start).
func (l *load) await() bool {
	select {
	case <-l.progress:
	case <-time.After(100 * time.Millisecond):
		if time.Since(time.Unix(0, max(l.lastNano.Load(), l.start.UnixNano()))) > 5*time.Second {
			return false
		}
	}
	return true
}

// result is what was delivered of want so far.
func (l *load) result(want int64) result {
	return finish(l.total.Load(), want, l.start, l.lastNano.Load())
}

func finish(got, want int64, start time.Time, last int64) result {
	secs := time.Unix(0, last).Sub(start).Seconds()
	r := result{Deliveries: got, Expected: want, Seconds: secs}
	if secs > 0 {
		r.PerSecond = float64(got) / secs
	}
	return r
}
