package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	"github.com/eclipse/paho.golang/paho"
)

// requireBin returns the path of a Debian client program, skipping only
// when interop tests are not demanded (LMOS_INTEROP unset).
func requireBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("LMOS_INTEROP") != "" {
			t.Fatalf("%s not found: scripts/test-deps.sh installs it", name)
		}
		t.Skipf("%s not installed; set LMOS_INTEROP=1 to make this a failure", name)
	}
	return p
}

// mosquittoSub starts mosquitto_sub against e's broker with client id id
// and args, and waits until its subscription to filter is in place. wait
// returns its output lines, failing on a non-zero exit.
func mosquittoSub(t *testing.T, e *env, id, filter string, args ...string) (wait func() []string) {
	t.Helper()
	bin := requireBin(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port, "-i", id, "-t", filter}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testwait.Eventually(t, 5*time.Second, id+" subscribed", func() bool {
		cl, ok := e.b.server.Clients.Get(id)
		if !ok {
			return false
		}
		_, ok = cl.State.Subscriptions.Get(filter)
		return ok
	})
	return func() []string {
		t.Helper()
		<-done
		if err != nil {
			t.Fatalf("%s: %v (%s); got %d lines", id, err, strings.TrimSpace(errb.String()), strings.Count(out.String(), "\n"))
		}
		return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	}
}

// Every retained message matching a wildcard SUBSCRIBE reaches the
// subscriber, at QoS 0, 1 and 2, before a live update that follows the
// SUBSCRIBE: 1,000 Things' statuses, as the hub retains them. The hub once
// sent 128 of them at QoS 0 and 130–197 at QoS 1/2 (a 128-packet queue).
func TestRetainedAllStatusesBeforeLive(t *testing.T) {
	e := newEnv(t, nil)
	const things = 1000
	const filter = lmos.ThingsPrefix + "+/status"
	for i := range things {
		topic := fmt.Sprintf("%surn:s%04d/status", lmos.ThingsPrefix, i)
		if err := e.b.publish(topic, []byte(`{"status":"online"}`), true, 1, "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	liveTopic := lmos.ThingsPrefix + "urn:s0500/status"
	for _, qos := range []string{"0", "1", "2"} {
		t.Run("QoS "+qos, func(t *testing.T) {
			// mosquitto_sub declares a Receive Maximum of 20.
			wait := mosquittoSub(t, e, "dash"+qos, filter, "-V", "mqttv5", "-q", qos, "-C", fmt.Sprint(things+1), "-F", "%r %q %t %p")
			// paho, MQTT 5 with no Receive Maximum (65,535), reading.
			var mu sync.Mutex
			var got []*paho.Publish
			all := make(chan struct{})
			pc := dialFunc(t, e.addr, &paho.Connect{CleanStart: true, KeepAlive: 30}, func(p *paho.Publish) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, p)
				if len(got) == things+1 {
					close(all)
				}
			})
			q := qos[0] - '0'
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: q}}}); err != nil {
				t.Fatal(err)
			}
			// The live update, published while the retained ones stream out.
			live := fmt.Sprintf(`{"status":"live %s"}`, qos)
			if err := e.b.publish(liveTopic, []byte(live), true, 1, "application/json"); err != nil {
				t.Fatal(err)
			}
			lines := wait()
			check := func(who string, retainedFlags []bool, topics, payloads []string, qoss []byte) {
				t.Helper()
				if len(topics) != things+1 {
					t.Fatalf("%s got %d messages, want %d", who, len(topics), things+1)
				}
				seen := map[string]bool{}
				for i := range things {
					if !retainedFlags[i] || payloads[i] != `{"status":"online"}` || qoss[i] != min(q, 1) || seen[topics[i]] {
						t.Fatalf("%s message %d: retain %v qos %d %s %s (seen %v)", who, i, retainedFlags[i], qoss[i], topics[i], payloads[i], seen[topics[i]])
					}
					seen[topics[i]] = true
				}
				if retainedFlags[things] || topics[things] != liveTopic || payloads[things] != live {
					t.Fatalf("%s last message: retain %v %s %s, want the live update", who, retainedFlags[things], topics[things], payloads[things])
				}
			}
			var flags []bool
			var topics, payloads []string
			var qoss []byte
			for _, l := range lines {
				f := strings.SplitN(l, " ", 4)
				if len(f) != 4 {
					t.Fatalf("mosquitto_sub line %q", l)
				}
				flags, qoss, topics, payloads = append(flags, f[0] == "1"), append(qoss, f[1][0]-'0'), append(topics, f[2]), append(payloads, f[3])
			}
			check("mosquitto_sub", flags, topics, payloads, qoss)
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				mu.Lock()
				n := len(got)
				mu.Unlock()
				t.Fatalf("paho got %d messages, want %d", n, things+1)
			}
			mu.Lock()
			flags, topics, payloads, qoss = nil, nil, nil, nil
			for _, p := range got {
				flags, qoss, topics, payloads = append(flags, p.Retain), append(qoss, p.QoS), append(topics, p.Topic), append(payloads, string(p.Payload))
			}
			mu.Unlock()
			check("paho", flags, topics, payloads, qoss)
			// The statuses go back for the next run.
			if err := e.b.publish(liveTopic, []byte(`{"status":"online"}`), true, 1, "application/json"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Live QoS 1 updates published while a SUBSCRIBE's retained messages are
// being stored in the session reach the subscriber after all of them. They
// once went out among them, as the client's window allowed, at times ahead
// of their own topic's retained copy: a subscriber of updates that are
// retained was left with the old value. mosquitto_sub (Receive Maximum
// 20) counts every message.
func TestLiveDuringSubscribeFollowsRetained(t *testing.T) {
	e := newEnv(t, nil)
	const things, live = 1000, 50
	const filter = lmos.ThingsPrefix + "+/status"
	topic := func(i int) string { return fmt.Sprintf("%surn:s%04d/status", lmos.ThingsPrefix, i) }
	for i := range things {
		if err := e.b.publish(topic(i), []byte(`{"status":"online"}`), true, 1, "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	// The updates start once the subscription is in mochi's topic index
	// (its client state lists it just after), while the hub stores the
	// retained messages: every one of them is delivered live.
	published := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if cl, ok := e.b.server.Clients.Get("dash"); ok {
				if _, ok := cl.State.Subscriptions.Get(filter); ok {
					break
				}
			}
			if time.Now().After(deadline) {
				published <- errors.New("mosquitto_sub never subscribed")
				return
			}
			time.Sleep(20 * time.Microsecond)
		}
		for j := range live {
			// Not retained: mochi's retained store is not safe to write
			// while a SUBSCRIBE reads it (go test -race; v2.7.9).
			if err := e.b.publish(topic(j*things/live), fmt.Appendf(nil, `{"status":"live %d"}`, j), false, 1, "application/json"); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	wait := mosquittoSub(t, e, "dash", filter, "-V", "mqttv5", "-q", "1", "-C", fmt.Sprint(things+live), "-F", "%r %t %p")
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	lines := wait()
	if len(lines) != things+live {
		t.Fatalf("mosquitto_sub got %d messages, want %d", len(lines), things+live)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 {
			t.Fatalf("mosquitto_sub line %q", l)
		}
		if i < things {
			if f[0] != "1" || f[2] != `{"status":"online"}` || seen[f[1]] {
				t.Fatalf("message %d: %q, want the retained message of a topic not seen yet", i, l)
			}
			seen[f[1]] = true
			continue
		}
		j := i - things
		if want := fmt.Sprintf(`0 %s {"status":"live %d"}`, topic(j*things/live), j); l != want {
			t.Fatalf("message %d: %q, want the live update %q", i, l, want)
		}
	}
}

// dialFunc connects a paho MQTT 5 client that hands every message to f.
func dialFunc(t *testing.T, addr string, cp *paho.Connect, f func(*paho.Publish)) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var closing atomic.Bool
	c := paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			f(pr.Packet)
			return true, nil
		}},
		OnClientError: func(err error) {
			if !closing.Load() {
				t.Errorf("paho: %v", err)
			}
		},
		OnServerDisconnect: func(d *paho.Disconnect) {
			if !closing.Load() {
				t.Errorf("paho: server sent DISCONNECT %#x", d.ReasonCode)
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, cp); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closing.Store(true)
		_ = c.Disconnect(&paho.Disconnect{})
		conn.Close()
	})
	return c
}

// A client that stops reading is disconnected once it has left its full
// queue unread (QoS 0) or a publisher waiting for room in its session
// (QoS 1) for the slow-client timeout; the drops and the disconnect are
// counted, and the publisher and a reading subscriber go on.
func TestSlowClientDisconnected(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("QoS %d", qos), func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.SlowClientTimeout = 300 * time.Millisecond
				c.MaxQueuedBytes = 64 << 10
			})
			const id = "urn:slow"
			topic := lmos.ThingsPrefix + id + "/events/e"
			owner, _ := joinOwner(t, e, id, nil)
			stuck := dialRaw(t, e.addr, "stuck", false)
			stuck.conn.(*net.TCPConn).SetReadBuffer(4 << 10)
			stuck.subscribeOpts(topic, 0, qos) // reads the SUBACK, then never again
			reader := mustDial(t, e.addr, nil)
			reader.mustSub(topic)
			payload := bytes.Repeat([]byte{'x'}, 1<<10)
			if qos == 0 {
				payload = bytes.Repeat([]byte{'x'}, 32<<10)
			}
			deadline := time.Now().Add(10 * time.Second)
			n := 0
			for e.b.SlowDisconnects() == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the stuck client is still connected after %d messages; dropped %d", n, e.b.Dropped("queue_full"))
				}
				owner.mustPub(topic, fmt.Appendf(nil, "%d %s", n, payload), qos, false)
				if m := reader.next(topic); !bytes.HasPrefix(m.Payload, fmt.Appendf(nil, "%d ", n)) {
					t.Fatalf("reader got %.10q, want message %d", m.Payload, n)
				}
				n++
			}
			if qos == 1 && n <= maxInflight {
				t.Fatalf("cut after %d QoS 1 messages, before its session held %d", n, maxInflight)
			}
			if qos == 0 && (e.b.Dropped("queue_full") == 0 || e.b.Dropped("slow_client") != 1) {
				t.Fatalf("dropped: queue_full %d, slow_client %d", e.b.Dropped("queue_full"), e.b.Dropped("slow_client"))
			}
			if qos == 1 && e.b.Dropped("queue_full")+e.b.Dropped("session_full") != 0 {
				t.Fatalf("QoS 1 messages dropped: %d, %d", e.b.Dropped("queue_full"), e.b.Dropped("session_full"))
			}
			testwait.Eventually(t, 2*time.Second, "the stuck client gone", func() bool {
				cl, ok := e.b.server.Clients.Get("stuck")
				return !ok || cl.Closed()
			})
			var w strings.Builder
			e.b.WritePrometheus(&w)
			if !strings.Contains(w.String(), "lmos_mqtt_slow_disconnects_total 1\n") {
				t.Fatalf("metrics:\n%s", w.String())
			}
		})
	}
}

// TestWritePrometheusFormat: every family has HELP and TYPE.
func TestWritePrometheusFormat(t *testing.T) {
	e := newEnv(t, nil)
	var w strings.Builder
	e.b.WritePrometheus(&w)
	families := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(w.String()))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "# TYPE ") {
			families[strings.Fields(l)[2]] = true
			continue
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		if !families[name] {
			t.Fatalf("%q has no TYPE line before it", l)
		}
	}
	for _, r := range dropReasonNames {
		if !strings.Contains(w.String(), fmt.Sprintf("lmos_mqtt_dropped_total{reason=%q} 0\n", r)) {
			t.Fatalf("no %s counter:\n%s", r, w.String())
		}
	}
}

// A QoS 1 subscriber that reads receives every message the broker
// acknowledged, whatever its Receive Maximum and however many the
// publisher has in flight (paho with 1, 16 and 64; mosquitto_pub -l, whose
// window is 20): paho (MQTT 5) declaring 1, 20 and 65,535, and
// mosquitto_sub over MQTT 5 (declaring 20) and 3.1.1. The hub once lost
// hundreds of 20,000 (mochi's 128-slot queue) and stalled subscribers
// declaring a Receive Maximum after a few dozen.
func TestQoS1EveryAcknowledgedMessage(t *testing.T) {
	const n = 3000
	for _, inFlight := range []int{1, 16, 64, 0} {
		name := fmt.Sprintf("%d in flight", inFlight)
		if inFlight == 0 {
			name = "mosquitto_pub"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			const id = "urn:q1"
			topic := lmos.ThingsPrefix + id + "/events/n"
			owner, creds := joinOwner(t, e, id, nil)
			var waits []func() []string
			for _, v := range []string{"mqttv5", "mqttv311"} {
				waits = append(waits, mosquittoSub(t, e, "mosq-"+v, topic, "-V", v, "-q", "1", "-C", fmt.Sprint(n)))
			}
			type counter struct {
				sync.Mutex
				seen map[string]int
				all  chan struct{}
			}
			var pahos []*counter
			for _, rm := range []uint16{1, 20, 65535} {
				c := &counter{seen: map[string]int{}, all: make(chan struct{})}
				pahos = append(pahos, c)
				pc := dialFunc(t, e.addr, &paho.Connect{CleanStart: true, KeepAlive: 30, Properties: &paho.ConnectProperties{ReceiveMaximum: &rm}},
					func(p *paho.Publish) {
						c.Lock()
						defer c.Unlock()
						c.seen[string(p.Payload)]++
						if len(c.seen) == n {
							close(c.all)
						}
					})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			if inFlight == 0 {
				var lines strings.Builder
				for i := range n {
					fmt.Fprintf(&lines, "%d\n", i)
				}
				host, port, _ := net.SplitHostPort(e.addr)
				cmd := exec.Command(requireBin(t, "mosquitto_pub"), "-h", host, "-p", port, "-V", "mqttv5", "-q", "1",
					"-u", creds.Username, "-P", creds.Password, "-t", topic, "-l")
				cmd.Stdin = strings.NewReader(lines.String())
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("mosquitto_pub: %v %s", err, out)
				}
			}
			// inFlight publishers, each waiting for its PUBACK.
			var wg sync.WaitGroup
			for w := range inFlight {
				wg.Go(func() {
					for i := w; i < n; i += inFlight {
						if _, err := owner.pub(topic, fmt.Append(nil, i), 1, false, ""); err != nil {
							t.Errorf("publish %d: %v", i, err)
							return
						}
					}
				})
			}
			wg.Wait()
			for i, c := range pahos {
				select {
				case <-c.all:
				case <-time.After(20 * time.Second):
					c.Lock()
					for _, cl := range e.b.server.Clients.GetAll() {
						if oc, ok := cl.Net.Conn.(*outConn); ok && cl.Properties.Props.ReceiveMaximum == 1 {
							oc.mu.Lock()
							t.Logf("RM1 client: unacked %v waiting %d window %d inflight %d dead %v q %d flushing %v holding %v", oc.unacked, len(oc.waiting), oc.window, cl.State.Inflight.Len(), oc.dead, len(oc.q), oc.flushing, oc.sub != nil)
							oc.mu.Unlock()
						}
					}
					t.Fatalf("paho subscriber %d got %d of %d messages", i, len(c.seen), n)
				}
				c.Lock()
				for p, k := range c.seen {
					if k != 1 {
						t.Fatalf("paho subscriber %d got %s %d times", i, p, k)
					}
				}
				c.Unlock()
			}
			for _, wait := range waits {
				lines := wait()
				seen := map[string]bool{}
				for _, l := range lines {
					seen[l] = true
				}
				if len(lines) != n || len(seen) != n {
					t.Fatalf("mosquitto_sub got %d messages, %d distinct, want %d", len(lines), len(seen), n)
				}
			}
			if d := e.b.Dropped("queue_full") + e.b.Dropped("session_full") + e.b.Dropped("slow_client"); d != 0 {
				t.Fatalf("%d deliveries dropped", d)
			}
		})
	}
}

// An unflowed burst of small QoS 0 messages (mosquitto_pub -l) reaches a
// reading subscriber whole: the queue is sized in bytes. Through the
// 128-packet queue it once lost half.
func TestQoS0BurstReachesReader(t *testing.T) {
	pub := requireBin(t, "mosquitto_pub")
	e := newEnv(t, nil)
	const id = "urn:burst"
	topic := lmos.ThingsPrefix + id + "/events/n"
	_, creds := joinOwner(t, e, id, nil)
	const n = 10000
	wait := mosquittoSub(t, e, "burst-sub", topic, "-V", "mqttv5", "-C", fmt.Sprint(n))
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "%d\n", i)
	}
	host, port, _ := net.SplitHostPort(e.addr)
	cmd := exec.Command(pub, "-h", host, "-p", port, "-V", "mqttv5", "-u", creds.Username, "-P", creds.Password, "-t", topic, "-l")
	cmd.Stdin = strings.NewReader(lines.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	got := wait()
	if len(got) != n {
		t.Fatalf("got %d of %d", len(got), n)
	}
	for i, l := range got {
		if l != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, l)
		}
	}
}

// An offline persistent session stores up to maxInflight QoS 1 messages;
// more are dropped and counted (session_full), and on reconnect the client
// (mosquitto_sub, declaring a Receive Maximum of 20) receives every stored
// one.
func TestOfflineSessionKeepsQoS1(t *testing.T) {
	bin := requireBin(t, "mosquitto_sub")
	e := newEnv(t, nil)
	const id = "urn:offline"
	topic := lmos.ThingsPrefix + id + "/events/n"
	owner, _ := joinOwner(t, e, id, nil)
	host, port, _ := net.SplitHostPort(e.addr)
	// Sessions persist for identities only (anonymous.go): the keeper is
	// a Thing.
	kc := e.thing(t, "urn:keeper")
	args := []string{"-h", host, "-p", port, "-V", "mqttv5", "-c", "-i", "keeper", "-x", "3600", "-q", "1", "-t", topic,
		"-u", kc.Username, "-P", kc.Password}
	if out, err := exec.Command(bin, append(args, "-E")...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_sub -E: %v %s", err, out)
	}
	testwait.Eventually(t, 2*time.Second, "keeper offline", func() bool {
		cl, ok := e.b.server.Clients.Get("keeper")
		return ok && cl.Closed()
	})
	const extra = 6
	for i := range maxInflight + extra {
		owner.mustPub(topic, fmt.Append(nil, i), 1, false)
	}
	if d := e.b.Dropped("session_full"); d != extra {
		t.Fatalf("session_full %d, want %d", d, extra)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(args, "-C", fmt.Sprint(maxInflight))...).Output()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v; got %d lines", err, bytes.Count(out, []byte("\n")))
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	if len(seen) != maxInflight || !seen["0"] || !seen[fmt.Sprint(maxInflight-1)] {
		t.Fatalf("got %d distinct of %d", len(seen), maxInflight)
	}
}

// A client publishing QoS 1 to its own subscription and never
// acknowledging what it receives is not waited for (the wait would be on
// its own goroutine): its session may hold twice the limit, then it is cut
// off and counted.
func TestOwnUnacknowledgedMessagesBounded(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SlowClientTimeout = time.Minute })
	const id = "urn:self"
	topic := lmos.ThingsPrefix + id + "/events/e"
	_, creds := joinOwner(t, e, id, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	str := func(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }
	vh := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0xc2, 0, 60}, str("self")...) // v3.1.1, username, password, clean
	vh = append(append(vh, str(creds.Username)...), str(creds.Password)...)
	var out []byte
	out = append(appendVarInt(append(out, 0x10), len(vh)), vh...)
	sub := append(append([]byte{0, 1}, str(topic)...), 1)
	out = append(appendVarInt(append(out, 0x82), len(sub)), sub...)
	// Its identifiers (from 40,000) do not collide with the hub's (from 1):
	// mochi would delete a stored delivery with the same identifier.
	for i := range 2*maxInflight + 10 {
		body := append(append(str(topic), byte((40000+i)>>8), byte(40000+i)), 'x')
		out = append(appendVarInt(append(out, 0x32), len(body)), body...)
	}
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "the client cut off", func() bool { return e.b.SlowDisconnects() == 1 })
	// Everything it was sent, then the end of the connection.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("read until closed: %v", err)
	}
}

// A subscriber that publishes QoS 1 itself, with packet identifiers that
// collide with those of the deliveries waiting for its Receive Maximum,
// still receives every message (mochi deletes a stored delivery when the
// client publishes with its identifier).
func TestQoS1ReaderThatPublishesGetsAll(t *testing.T) {
	e := newEnv(t, nil)
	a, _ := joinOwner(t, e, "urn:pub-a", nil)
	_, bc := joinOwner(t, e, "urn:pub-b", nil)
	const n = 300
	topicA := lmos.ThingsPrefix + "urn:pub-a/events/n"
	var mu sync.Mutex
	seen := map[string]bool{}
	all := make(chan struct{})
	rm := uint16(1)
	cp := withCreds(bc)
	cp.KeepAlive = 30
	cp.Properties = &paho.ConnectProperties{ReceiveMaximum: &rm}
	b := dialFunc(t, e.addr, cp, func(p *paho.Publish) {
		mu.Lock()
		defer mu.Unlock()
		seen[string(p.Payload)] = true
		if len(seen) == n {
			close(all)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topicA, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			a.mustPub(topicA, fmt.Append(nil, i), 1, false)
		}
	})
	wg.Go(func() { // b's own identifiers run from 1 too
		for i := range n {
			if _, err := b.Publish(ctx, &paho.Publish{Topic: lmos.ThingsPrefix + "urn:pub-b/events/n", Payload: fmt.Append(nil, i), QoS: 1}); err != nil {
				t.Errorf("b publish: %v", err)
				return
			}
		}
	})
	wg.Wait()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("b got %d of %d", len(seen), n)
	}
}

// The hub's own QoS 1 publishes (status, TDs, proxy writes) never wait for
// room in a subscriber's full session, whatever the slow-client timeout:
// the subscriber that does not acknowledge is cut off at twice the limit
// instead, and nothing is dropped.
func TestHubPublishesDoNotWaitOnFullSession(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SlowClientTimeout = time.Hour })
	topic := lmos.ThingsPrefix + "urn:hub-publishes/status"
	stuck := dialRaw(t, e.addr, "stuck", false)
	stuck.subscribeOpts(topic, 0, 1) // reads the SUBACK, then never again
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2*maxInflight + 1 { // the last one cuts it off, and stays in its session
			if err := e.b.server.Publish(topic, fmt.Appendf(nil, "%d", i), false, 1); err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // bounds a hang; a waiting publish would take an hour
		t.Fatal("the hub's publishes wait on a subscriber that does not acknowledge")
	}
	if e.b.SlowDisconnects() != 1 {
		t.Fatalf("slow disconnects %d, want 1", e.b.SlowDisconnects())
	}
	if d := e.b.Dropped("session_full") + e.b.Dropped("queue_full"); d != 0 {
		t.Fatalf("dropped %d", d)
	}
}

// A client that repeats a SUBSCRIBE without acknowledging what the last
// one sent stores each retained message once, not once per SUBSCRIBE.
func TestRepeatedSubscribeStoresRetainedOnce(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:retained-repeat"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/properties/p"
	owner, _ := joinOwner(t, e, id, nil)
	owner.mustPub(topic, make([]byte, 10<<10), 1, true)
	conn := rawConnect5(t, e.addr, "repeat", true)
	discard(conn)
	for i := 1; i <= 3000; i++ {
		subscribeRaw(t, conn, uint16(i), topic)
	}
	testwait.Eventually(t, 10*time.Second, "every SUBSCRIBE processed", func() bool {
		cl, ok := e.b.server.Clients.Get("repeat")
		return ok && cl.State.Subscriptions.Len() == 1 && atomic.LoadInt64(&e.b.server.Info.PacketsReceived) >= 3001
	})
	cl, _ := e.b.server.Clients.Get("repeat")
	if n := cl.State.Inflight.Len(); n != 1 {
		t.Fatalf("the session stores %d copies of one retained message", n)
	}
}

// TestMessageCounters: lmos_mqtt_messages_total counts each publish the
// broker routed once, lmos_mqtt_deliveries_total each copy for a
// subscriber (the dashboard's messages/s and deliveries/s).
func TestMessageCounters(t *testing.T) {
	e := newEnv(t, nil)
	anon := mustDial(t, e.addr, nil)
	res := anon.join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
	a := mustDial(t, e.addr, withCreds(res.Credentials))
	w1, w2 := mustDial(t, e.addr, nil), mustDial(t, e.addr, nil)
	w1.mustSub("lmos/v1/things/+/events/+")
	w2.mustSub("lmos/v1/things/urn:a/events/e")
	figure := func(name string) uint64 {
		var w strings.Builder
		e.b.WritePrometheus(&w)
		for _, l := range strings.Split(w.String(), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				return n
			}
		}
		t.Fatalf("no %s in the metrics:\n%s", name, w.String())
		return 0
	}
	m0, d0 := figure("lmos_mqtt_messages_total"), figure("lmos_mqtt_deliveries_total")
	const n = 5
	for i := range n {
		a.mustPub("lmos/v1/things/urn:a/events/e", fmt.Appendf(nil, `{"i":%d}`, i), byte(i%2), false)
	}
	for range n {
		w1.next("lmos/v1/things/urn:a/events/e")
		w2.next("lmos/v1/things/urn:a/events/e")
	}
	if m, d := figure("lmos_mqtt_messages_total")-m0, figure("lmos_mqtt_deliveries_total")-d0; m != n || d != 2*n {
		t.Fatalf("messages %d, deliveries %d; want %d and %d", m, d, n, 2*n)
	}
}
