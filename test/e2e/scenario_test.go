package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The cross-transport scenario (issue 10): agents on MQTT (the Go agent
// library over MQTT 5, mqtt.js over MQTT 5 at QoS 1 and over 3.1.1 at QoS
// 0) and on WebSocket (the Go agent over ws://) serve consumers over the
// HTTP proxy (streamed invocations, observe, event streams), the /ws
// envelope and MQTT (paho.golang and mqtt.js), in rounds of interleaved
// invocations, writes, reads and events, with reconnects, leaves and joins
// between the rounds. A ledger checks that every request got exactly its
// own results, every subscriber every event emitted while it was
// subscribed (count and order), every observer every value written, and
// that no client reported a protocol error or lost a connection it did not
// give up itself.

// ledger is what every consumer saw, keyed "consumer|thing id".
type ledger struct {
	mu sync.Mutex
	// emitted are the tick seqs each agent emitted; events what each
	// subscriber got, from the index into emitted at its subscription.
	emitted map[string][]int
	events  map[string][]int
	from    map[string]int
	// written are the levels written to each Thing; values what each
	// observer saw, from its index into written.
	written map[string][]float64
	values  map[string][]float64
	vfrom   map[string]int
	// problems are protocol errors and wrong results, reported at the end
	// and at each round's check.
	problems []string
	// results counts the invocations checked; delivered the events and
	// values recorded.
	results, delivered int
}

func newLedger() *ledger {
	return &ledger{emitted: map[string][]int{}, events: map[string][]int{}, from: map[string]int{},
		written: map[string][]float64{}, values: map[string][]float64{}, vfrom: map[string]int{}}
}

func (l *ledger) problem(format string, args ...any) {
	l.mu.Lock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// subscribed starts counting consumer's events of thing from now on.
func (l *ledger) subscribed(consumer, thing string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := consumer + "|" + thing
	l.from[k] = len(l.emitted[thing])
	l.events[k] = nil
}

func (l *ledger) observed(consumer, thing string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := consumer + "|" + thing
	l.vfrom[k] = len(l.written[thing])
	l.values[k] = nil
}

// event records one tick event; data is its JSON.
func (l *ledger) event(consumer, thing string, data []byte) {
	var d struct{ Seq *int }
	if err := json.Unmarshal(data, &d); err != nil || d.Seq == nil {
		l.problem("%s: tick of %s with data %q", consumer, thing, data)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := consumer + "|" + thing
	if _, ok := l.from[k]; !ok {
		l.problems = append(l.problems, fmt.Sprintf("%s: tick of %s it never subscribed", consumer, thing))
	}
	l.events[k] = append(l.events[k], *d.Seq)
	l.delivered++
}

// value records one observed level; data is its JSON.
func (l *ledger) value(consumer, thing string, data []byte) {
	var v float64
	if err := json.Unmarshal(data, &v); err != nil {
		l.problem("%s: level of %s is %q", consumer, thing, data)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := consumer + "|" + thing
	l.values[k] = append(l.values[k], v)
	l.delivered++
}

// missing says what the subscribers and observers still lack: an event
// emitted while subscribed, or the level last written. Once nothing is
// missing it also reports events beyond, or out of, what was emitted.
func (l *ledger) missing() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, from := range l.from {
		thing := k[strings.Index(k, "|")+1:]
		want := l.emitted[thing][from:]
		got := l.events[k]
		switch {
		case len(got) < len(want):
			out = append(out, fmt.Sprintf("%s: %d of %d events", k, len(got), len(want)))
		case !slices.Equal(got, want):
			out = append(out, fmt.Sprintf("%s: events %v, want %v", k, got, want))
		}
	}
	for k, from := range l.vfrom {
		thing := k[strings.Index(k, "|")+1:]
		want := l.written[thing][from:]
		got := l.values[k]
		if len(want) == 0 {
			continue
		}
		if len(got) == 0 || got[len(got)-1] != want[len(want)-1] {
			out = append(out, fmt.Sprintf("%s: values %v, the last written is %v", k, got, want[len(want)-1]))
			continue
		}
		// Every value written while observing, in order (values repeat
		// when an agent republishes after a reconnect).
		i := 0
		for _, v := range got {
			if i < len(want) && v == want[i] {
				i++
			}
		}
		if i < len(want) {
			out = append(out, fmt.Sprintf("%s: values %v, want %v in order", k, got, want))
		}
	}
	slices.Sort(out)
	return out
}

// checkResult checks one invocation's results: n running {tag, i} in
// order, then completed {tag, n, agent}.
func (l *ledger) checkResult(consumer, thing, tag string, n int, running []map[string]any, final map[string]any) {
	l.mu.Lock()
	l.results++
	l.mu.Unlock()
	ok := len(running) == n
	for i := 0; ok && i < n; i++ {
		ok = running[i]["tag"] == tag && running[i]["i"] == float64(i)
	}
	if !ok || final["tag"] != tag || final["n"] != float64(n) || final["agent"] != thing {
		l.problem("%s invoking %s (%s): running %v, completed %v; want %d partial results", consumer, thing, tag, running, final, n)
	}
}

// scenarioConsumer is one consumer transport.
type scenarioConsumer interface {
	name() string
	// invoke runs count once per tag with n partial results and checks
	// each invocation's results into the ledger.
	invoke(thing string, tags []string, n, qos int) error
	subscribe(thing string) error
	observe(thing string) error
	write(thing string, v float64) error
	// read returns the current level (NaN-free: an error when unknown).
	read(thing string) (float64, error)
	// healthy reports a connection lost or a protocol error.
	healthy() error
}

// inParallel runs f for each index with at most limit at once and
// returns the first error.
func inParallel(n, limit int, f func(i int) error) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// httpScenario consumes through the interaction proxy.
type httpScenario struct {
	h       *testHub
	l       *ledger
	mu      sync.Mutex
	streams []*scenarioStream
}

type scenarioStream struct {
	path   string
	cancel context.CancelFunc
	ended  chan struct{}
	err    error
}

func (c *httpScenario) name() string { return "http" }

func (c *httpScenario) proxy(thing, rest string) string {
	return c.h.URL + "/proxy/" + pathEscape(thing) + "/" + rest
}

func (c *httpScenario) invoke(thing string, tags []string, n, _ int) error {
	return inParallel(len(tags), 3, func(i int) error {
		body, _ := json.Marshal(map[string]any{"n": n, "tag": tags[i]})
		req, _ := http.NewRequest("POST", c.proxy(thing, "actions/count"), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("http invoke %s: %w", tags[i], err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("http invoke %s: %d %s", tags[i], resp.StatusCode, b)
		}
		var running []map[string]any
		var final map[string]any
		for _, e := range readSSE(c.h.t, resp.Body) {
			var d map[string]any
			if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
				c.l.problem("http invoke %s: %s event data %q", tags[i], e.Type, e.Data)
			}
			switch {
			case e.Type == "running" && final == nil:
				running = append(running, d)
			case e.Type == "completed" && final == nil:
				final = d
			default:
				c.l.problem("http invoke %s: event %s %s", tags[i], e.Type, e.Data)
			}
		}
		c.l.checkResult("http", thing, tags[i], n, running, final)
		return nil
	})
}

// stream opens an SSE stream; it answers 200 once the hub's subscription
// is in place (PROTOCOL §10), and each event named name goes to on.
func (c *httpScenario) stream(path, name string, on func(data []byte)) error {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", path, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return err
	}
	if resp.StatusCode != 200 {
		cancel()
		resp.Body.Close()
		return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	s := &scenarioStream{path: path, cancel: cancel, ended: make(chan struct{})}
	c.mu.Lock()
	c.streams = append(c.streams, s)
	c.mu.Unlock()
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var typ string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				typ = line[7:]
			case strings.HasPrefix(line, "data: ") && typ == name:
				on([]byte(line[6:]))
			case strings.HasPrefix(line, "data: "):
				c.l.problem("stream %s: event %q %s", path, typ, line)
			}
		}
		s.err = sc.Err()
	}()
	return nil
}

func (c *httpScenario) subscribe(thing string) error {
	c.l.subscribed("http", thing)
	return c.stream(c.proxy(thing, "events/tick"), "tick", func(d []byte) { c.l.event("http", thing, d) })
}

func (c *httpScenario) observe(thing string) error {
	c.l.observed("http", thing)
	return c.stream(c.proxy(thing, "properties/level"), "level", func(d []byte) { c.l.value("http", thing, d) })
}

func (c *httpScenario) write(thing string, v float64) error {
	req, _ := http.NewRequest("PUT", c.proxy(thing, "properties/level"), strings.NewReader(fmt.Sprint(v)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		return fmt.Errorf("PUT level of %s: %d", thing, resp.StatusCode)
	}
	return nil
}

func (c *httpScenario) read(thing string) (float64, error) {
	resp, err := http.Get(c.proxy(thing, "properties/level"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v float64
	if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil {
		return 0, fmt.Errorf("GET level of %s: %d %s", thing, resp.StatusCode, b)
	}
	return v, nil
}

func (c *httpScenario) healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.streams {
		select {
		case <-s.ended:
			errs = append(errs, fmt.Errorf("stream %s ended: %v", s.path, s.err))
		default:
		}
	}
	return errors.Join(errs...)
}

func (c *httpScenario) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.streams {
		s.cancel()
		<-s.ended
	}
}

// wsScenario consumes over the /ws envelope; replies and subscription
// messages are routed by correlationId.
type wsScenario struct {
	l      *ledger
	c      *websocket.Conn
	mu     sync.Mutex
	wmu    sync.Mutex
	reqs   map[string]chan map[string]any
	subs   map[string]func(m map[string]any)
	closed chan struct{}
	err    error
}

func dialWSScenario(h *testHub, l *ledger) (*wsScenario, error) {
	c, err := h.wsDialErr("/ws", "lmosprotocol", nil)
	if err != nil {
		return nil, err
	}
	w := &wsScenario{l: l, c: c, reqs: map[string]chan map[string]any{}, subs: map[string]func(map[string]any){}, closed: make(chan struct{})}
	go func() {
		defer close(w.closed)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				w.err = err
				return
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				l.problem("ws: undecodable frame %q", b)
				continue
			}
			id, _ := m["correlationId"].(string)
			w.mu.Lock()
			ch, sub := w.reqs[id], w.subs[id]
			w.mu.Unlock()
			switch {
			case sub != nil && (m["messageType"] == "event" || m["messageType"] == "propertyReading"):
				sub(m)
			case ch != nil:
				select {
				case ch <- m:
				default:
					l.problem("ws: more than 64 replies to %s", id)
				}
			default:
				l.problem("ws: uncorrelated message %s", b)
			}
		}
	}()
	return w, nil
}

func (w *wsScenario) name() string { return "ws" }

// request sends m and returns its replies' channel; done forgets it.
func (w *wsScenario) request(m map[string]any) (chan map[string]any, func(), error) {
	id := uuid.NewString()
	m["messageId"] = id
	ch := make(chan map[string]any, 64)
	w.mu.Lock()
	w.reqs[id] = ch
	w.mu.Unlock()
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.wmu.Lock()
	err := w.c.Write(ctx, websocket.MessageText, b)
	w.wmu.Unlock()
	done := func() {
		w.mu.Lock()
		delete(w.reqs, id)
		w.mu.Unlock()
	}
	return ch, done, err
}

func (w *wsScenario) reply(ch chan map[string]any) (map[string]any, error) {
	select {
	case m := <-ch:
		return m, nil
	case <-time.After(10 * time.Second):
		return nil, errors.New("no reply within 10 s")
	}
}

func (w *wsScenario) invoke(thing string, tags []string, n, _ int) error {
	return inParallel(len(tags), 3, func(i int) error {
		ch, done, err := w.request(map[string]any{"messageType": "invokeAction", "thingId": thing, "action": "count", "input": map[string]any{"n": n, "tag": tags[i]}})
		defer done()
		if err != nil {
			return err
		}
		var running []map[string]any
		for {
			m, err := w.reply(ch)
			if err != nil {
				return fmt.Errorf("ws invoke %s: %w", tags[i], err)
			}
			out, _ := m["output"].(map[string]any)
			switch {
			case m["messageType"] == "actionStatus" && m["status"] == "running":
				running = append(running, out)
			case m["messageType"] == "actionStatus" && m["status"] == "completed":
				w.l.checkResult("ws", thing, tags[i], n, running, out)
				return nil
			default:
				return fmt.Errorf("ws invoke %s: %v", tags[i], m)
			}
		}
	})
}

// watch sends a subscribeEvent or observeProperty and routes what it
// brings to on once acknowledged.
func (w *wsScenario) watch(m map[string]any, on func(m map[string]any)) error {
	id := uuid.NewString()
	m["messageId"] = id
	ch := make(chan map[string]any, 4)
	w.mu.Lock()
	w.reqs[id], w.subs[id] = ch, on
	w.mu.Unlock()
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.wmu.Lock()
	err := w.c.Write(ctx, websocket.MessageText, b)
	w.wmu.Unlock()
	if err != nil {
		return err
	}
	r, err := w.reply(ch)
	if err != nil || r["messageType"] != "acknowledgement" {
		return fmt.Errorf("ws %s: %v %v", m["messageType"], r, err)
	}
	return nil
}

func (w *wsScenario) subscribe(thing string) error {
	w.l.subscribed("ws", thing)
	return w.watch(map[string]any{"messageType": "subscribeEvent", "thingId": thing, "event": "tick"}, func(m map[string]any) {
		if m["event"] != "tick" || m["thingId"] != thing {
			w.l.problem("ws: event %v on the tick subscription of %s", m, thing)
			return
		}
		b, _ := json.Marshal(m["data"])
		w.l.event("ws", thing, b)
	})
}

func (w *wsScenario) observe(thing string) error {
	w.l.observed("ws", thing)
	return w.watch(map[string]any{"messageType": "observeProperty", "thingId": thing, "name": "level"}, func(m map[string]any) {
		b, _ := json.Marshal(m["value"])
		w.l.value("ws", thing, b)
	})
}

func (w *wsScenario) write(thing string, v float64) error {
	ch, done, err := w.request(map[string]any{"messageType": "writeProperty", "thingId": thing, "name": "level", "value": v})
	defer done()
	if err != nil {
		return err
	}
	m, err := w.reply(ch)
	if err != nil || m["messageType"] != "acknowledgement" {
		return fmt.Errorf("ws write %s: %v %v", thing, m, err)
	}
	return nil
}

func (w *wsScenario) read(thing string) (float64, error) {
	ch, done, err := w.request(map[string]any{"messageType": "readProperty", "thingId": thing, "name": "level"})
	defer done()
	if err != nil {
		return 0, err
	}
	m, err := w.reply(ch)
	v, ok := m["value"].(float64)
	if err != nil || m["messageType"] != "propertyReading" || !ok {
		return 0, fmt.Errorf("ws read %s: %v %v", thing, m, err)
	}
	return v, nil
}

func (w *wsScenario) healthy() error {
	select {
	case <-w.closed:
		return fmt.Errorf("ws connection lost: %v", w.err)
	default:
		return nil
	}
}

// pahoScenario is a paho.golang MQTT 5 consumer with one reply inbox.
type pahoScenario struct {
	h        *testHub
	l        *ledger
	clientID string
	mu       sync.Mutex
	cli      *paho.Client
	conn     net.Conn
	closing  bool
	// gen numbers the connections: an error the previous one reports
	// after a reconnect (its read loop ending) is not the new one's.
	gen     int
	pending map[string]chan *paho.Publish
	topics  map[string]func(p *paho.Publish)
	errs    []error
}

func (c *pahoScenario) name() string { return "paho" }

func (c *pahoScenario) inbox() string { return "lmos/v1/clients/" + c.clientID + "/r" }

// connect opens a session (clean start) and subscribes the inbox and every
// topic watched so far.
func (c *pahoScenario) connect() error {
	conn, err := net.Dial("tcp", c.h.Main.MQTTAddr.String())
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	cli := paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.receive(pr.Packet)
			return true, nil
		}},
		OnClientError: func(err error) { c.fail(gen, fmt.Errorf("paho client error: %w", err)) },
		OnServerDisconnect: func(d *paho.Disconnect) {
			c.fail(gen, fmt.Errorf("DISCONNECT from the hub: reason %d", d.ReasonCode))
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Connect(ctx, &paho.Connect{ClientID: c.clientID, CleanStart: true, KeepAlive: 30}); err != nil {
		conn.Close()
		return err
	}
	c.mu.Lock()
	c.cli, c.conn, c.closing = cli, conn, false
	filters := []string{c.inbox()}
	for t := range c.topics {
		filters = append(filters, t)
	}
	c.mu.Unlock()
	return c.sub(filters...)
}

func (c *pahoScenario) fail(gen int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closing && gen == c.gen {
		c.errs = append(c.errs, err)
	}
}

func (c *pahoScenario) sub(filters ...string) error {
	var opts []paho.SubscribeOptions
	for _, f := range filters {
		opts = append(opts, paho.SubscribeOptions{Topic: f, QoS: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.mu.Lock()
	cli := c.cli
	c.mu.Unlock()
	sa, err := cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts})
	if err != nil {
		return err
	}
	for i, r := range sa.Reasons {
		if r >= 0x80 {
			return fmt.Errorf("SUBACK refused %s: %#x", filters[i], r)
		}
	}
	return nil
}

// reconnect ends the session and opens a new one with the same client id
// at once, as agents do (the hub makes the new one wait until the old
// one's cleanup is over: PROTOCOL §10).
func (c *pahoScenario) reconnect() error {
	c.mu.Lock()
	c.closing = true
	cli, conn := c.cli, c.conn
	c.mu.Unlock()
	_ = cli.Disconnect(&paho.Disconnect{})
	conn.Close()
	return c.connect()
}

func (c *pahoScenario) receive(p *paho.Publish) {
	c.mu.Lock()
	on := c.topics[p.Topic]
	var ch chan *paho.Publish
	if p.Topic == c.inbox() && p.Properties != nil {
		ch = c.pending[string(p.Properties.CorrelationData)]
	}
	c.mu.Unlock()
	switch {
	case on != nil:
		on(p)
	case ch != nil:
		select {
		case ch <- p:
		default:
			c.l.problem("paho: more than 64 results for one request")
		}
	default:
		c.l.problem("paho: unexpected message on %s (%v)", p.Topic, p.Properties)
	}
}

func (c *pahoScenario) publish(p *paho.Publish) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.mu.Lock()
	cli := c.cli
	c.mu.Unlock()
	r, err := cli.Publish(ctx, p)
	if err == nil && r != nil && r.ReasonCode >= 0x80 {
		err = fmt.Errorf("PUBACK %#x", r.ReasonCode)
	}
	return err
}

func (c *pahoScenario) invoke(thing string, tags []string, n, qos int) error {
	return inParallel(len(tags), 3, func(i int) error {
		tag := tags[i]
		ch := make(chan *paho.Publish, 64)
		c.mu.Lock()
		c.pending[tag] = ch
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.pending, tag)
			c.mu.Unlock()
		}()
		in, _ := json.Marshal(map[string]any{"n": n, "tag": tag})
		err := c.publish(&paho.Publish{Topic: "lmos/v1/things/" + lmos.TopicKey(thing) + "/actions/count", QoS: byte(qos), Payload: in,
			Properties: &paho.PublishProperties{ResponseTopic: c.inbox(), CorrelationData: []byte(tag), ContentType: "application/json",
				User: paho.UserProperties{{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}})
		if err != nil {
			return fmt.Errorf("paho invoke %s: %w", tag, err)
		}
		var running []map[string]any
		for {
			select {
			case p := <-ch:
				var d map[string]any
				if err := json.Unmarshal(p.Payload, &d); err != nil {
					c.l.problem("paho invoke %s: result %q", tag, p.Payload)
				}
				switch p.Properties.User.Get("lmos-status") {
				case "running":
					running = append(running, d)
				case "completed":
					c.l.checkResult("paho", thing, tag, n, running, d)
					return nil
				default:
					return fmt.Errorf("paho invoke %s: %s %s", tag, p.Properties.User.Get("lmos-status"), p.Payload)
				}
			case <-time.After(10 * time.Second):
				return fmt.Errorf("paho invoke %s: no final result within 10 s (after %d results; the inbox has %d subscribers)", tag, len(running), c.h.Main.Broker.Subscribers(c.inbox()))
			}
		}
	})
}

func (c *pahoScenario) watch(topic string, on func(p *paho.Publish)) error {
	c.mu.Lock()
	c.topics[topic] = on
	c.mu.Unlock()
	return c.sub(topic)
}

func (c *pahoScenario) subscribe(thing string) error {
	c.l.subscribed("paho", thing)
	return c.watch("lmos/v1/things/"+lmos.TopicKey(thing)+"/events/tick", func(p *paho.Publish) { c.l.event("paho", thing, p.Payload) })
}

func (c *pahoScenario) observe(thing string) error {
	c.l.observed("paho", thing)
	return c.watch("lmos/v1/things/"+lmos.TopicKey(thing)+"/properties/level", func(p *paho.Publish) { c.l.value("paho", thing, p.Payload) })
}

func (c *pahoScenario) write(thing string, v float64) error {
	return c.publish(&paho.Publish{Topic: "lmos/v1/things/" + lmos.TopicKey(thing) + "/properties/level/set", QoS: 1,
		Payload: []byte(fmt.Sprint(v)), Properties: &paho.PublishProperties{ContentType: "application/json"}})
}

func (c *pahoScenario) read(string) (float64, error) { return 0, errors.ErrUnsupported }

func (c *pahoScenario) healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// jsScenario is the mqtt.js consumer script; one dispatcher reads its
// reports: results to the running batch, messages to the ledger.
type jsScenario struct {
	p       *scriptProc
	l       *ledger
	mu      sync.Mutex
	topics  map[string]func(data []byte)
	results chan map[string]any
}

func newJSScenario(p *scriptProc, l *ledger) *jsScenario {
	c := &jsScenario{p: p, l: l, topics: map[string]func([]byte){}, results: make(chan map[string]any, 1024)}
	go func() {
		for {
			select {
			case m := <-p.lines:
				if topic, ok := m["msg"].(string); ok {
					c.mu.Lock()
					on := c.topics[topic]
					c.mu.Unlock()
					b, _ := json.Marshal(m["data"])
					if on == nil {
						l.problem("mqtt.js: message on %s", topic)
					} else {
						on(b)
					}
				} else if m["result"] != nil {
					c.results <- m
				}
			case <-p.exited:
				return
			}
		}
	}()
	return c
}

func (c *jsScenario) name() string { return "mqtt.js" }

func (c *jsScenario) invoke(thing string, tags []string, n, qos int) error {
	if err := c.p.doErr(30*time.Second, map[string]any{"cmd": "batch", "thing": thing, "action": "count", "tags": tags, "n": n, "inflight": 3, "qos": qos}); err != nil {
		return err
	}
	for range tags {
		select {
		case m := <-c.results:
			running := []map[string]any{}
			rs, _ := m["running"].([]any)
			tag, _ := m["result"].(string)
			for _, i := range rs {
				running = append(running, map[string]any{"tag": tag, "i": i})
			}
			final, _ := m["completed"].(map[string]any)
			if !slices.Contains(tags, tag) {
				c.l.problem("mqtt.js: result for %s in the batch %v", tag, tags)
			}
			c.l.checkResult("mqtt.js", thing, tag, n, running, final)
		case <-time.After(5 * time.Second):
			return errors.New("mqtt.js: a result report is missing")
		}
	}
	return nil
}

func (c *jsScenario) watch(topic string, on func([]byte)) error {
	c.mu.Lock()
	c.topics[topic] = on
	c.mu.Unlock()
	return c.p.doErr(5*time.Second, map[string]any{"cmd": "sub", "topic": topic, "qos": 1})
}

func (c *jsScenario) subscribe(thing string) error {
	c.l.subscribed("mqtt.js", thing)
	return c.watch("lmos/v1/things/"+lmos.TopicKey(thing)+"/events/tick", func(b []byte) { c.l.event("mqtt.js", thing, b) })
}

func (c *jsScenario) observe(thing string) error {
	c.l.observed("mqtt.js", thing)
	return c.watch("lmos/v1/things/"+lmos.TopicKey(thing)+"/properties/level", func(b []byte) { c.l.value("mqtt.js", thing, b) })
}

func (c *jsScenario) write(thing string, v float64) error {
	return c.p.doErr(5*time.Second, map[string]any{"cmd": "pub", "topic": "lmos/v1/things/" + lmos.TopicKey(thing) + "/properties/level/set", "data": v})
}

func (c *jsScenario) read(string) (float64, error) { return 0, errors.ErrUnsupported }

func (c *jsScenario) healthy() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if len(c.p.errs) > 0 {
		return fmt.Errorf("mqtt.js consumer: %v", c.p.errs)
	}
	select {
	case <-c.p.exited:
		return errors.New("mqtt.js consumer exited")
	default:
		return nil
	}
}

// tcpRelay forwards loopback connections to target, so that the test can
// cut an agent's connection the way a network does.
type tcpRelay struct {
	ln    net.Listener
	mu    sync.Mutex
	pairs []*relayPair
}

// relayPair is one relayed connection: in from the client, out to target.
type relayPair struct {
	in, out net.Conn
	// stalled: the client's side is gone, the target's stays open and
	// silent, as after a network failure the target has not noticed.
	stalled bool
}

func startRelay(t *testing.T, target string) *tcpRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRelay{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.pairs {
			p.in.Close()
			p.out.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p := &relayPair{in: in, out: out}
			r.mu.Lock()
			r.pairs = append(r.pairs, p)
			r.mu.Unlock()
			go func() {
				_, _ = io.Copy(out, in)
				r.mu.Lock()
				defer r.mu.Unlock()
				if !p.stalled {
					out.Close()
				}
			}()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return r
}

func (r *tcpRelay) addr() string { return r.ln.Addr().String() }

// cut closes both sides of every connection through the relay.
func (r *tcpRelay) cut() { r.drop(false) }

// stall closes the clients' sides only; the target's stay open, unread.
func (r *tcpRelay) stall() { r.drop(true) }

func (r *tcpRelay) drop(stall bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keep []*relayPair
	for _, p := range r.pairs {
		if p.stalled {
			keep = append(keep, p)
			continue
		}
		p.stalled = stall
		p.in.Close()
		if stall {
			keep = append(keep, p)
		} else {
			p.out.Close()
		}
	}
	r.pairs = keep
}

// warnings records an agent's log records at Warn and above, and logs
// every record to the test (shown when it fails).
type warnings struct {
	t    *testing.T
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var attrs strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&attrs, " %s=%v", a.Key, a.Value)
		return true
	})
	w.t.Logf("agent %s %s%s", r.Level, r.Message, attrs.String())
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// statusWatch follows every Thing's retained status topic.
type statusWatch struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (s *statusWatch) count(thing, status string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.seen[thing] {
		if v == status {
			n++
		}
	}
	return n
}

func TestCrossTransportScenario(t *testing.T) {
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	mqttURL := "mqtt://" + h.Main.MQTTAddr.String()
	l := newLedger()

	// Every status change of every Thing, as an MQTT client sees it.
	status := &statusWatch{seen: map[string][]string{}}
	sw := h.mqttDial(&paho.Connect{ClientID: "scenario-status", CleanStart: true})
	sw.sub("lmos/v1/things/+/status")
	go func() {
		for p := range sw.Msgs {
			key := strings.TrimSuffix(strings.TrimPrefix(p.Topic, "lmos/v1/things/"), "/status")
			status.mu.Lock()
			status.seen[key] = append(status.seen[key], string(p.Payload))
			status.mu.Unlock()
		}
	}()
	// online waits for the n-th "online" of thing (a fresh session's).
	online := func(thing string, n int) {
		t.Helper()
		waitFor(t, 15*time.Second, thing+" online", func() bool {
			th, err := h.Main.Registry.Get(thing)
			return status.count(lmos.TopicKey(thing), "online") >= n && err == nil && th.Meta.Presence.Status == hub.PresenceOnline
		})
	}

	// Agents.
	const goMQ, js5, js3, goWS, js3b = "urn:example:sc-go-mqtt", "urn:example:sc-js-v5", "urn:example:sc-js-311", "urn:example:sc-go-ws", "urn:example:sc-js-311b"
	mqRelay := startRelay(t, h.Main.MQTTAddr.String())
	wsRelay := startRelay(t, h.Main.HTTPAddr.String())
	goMQLog, goWSLog := &warnings{t: t}, &warnings{t: t}
	goMQAgent := newGoCounter(t, ctx, agent.Options{URL: "mqtt://" + mqRelay.addr(), Logger: slog.New(goMQLog)}, goMQ, 0)
	goWSAgent := newGoCounter(t, ctx, agent.Options{URL: "ws://" + wsRelay.addr() + "/ws", Logger: slog.New(goWSLog)}, goWS, 0)
	js5Agent := startScript(t, ctx, "mqtt.js agent (v5, QoS 1)", "mqttjs-agent.mjs", mqttURL, js5, "5", "1")
	js3Agent := startScript(t, ctx, "mqtt.js agent (v3.1.1, QoS 0)", "mqttjs-agent.mjs", mqttURL, js3, "4", "0")
	for _, id := range []string{goMQ, goWS, js5, js3} {
		online(id, 1)
	}
	emitters := map[string]func(from, n int) error{
		goMQ: func(from, n int) error { return emitGo(goMQAgent, from, n) },
		goWS: func(from, n int) error { return emitGo(goWSAgent, from, n) },
		js5: func(from, n int) error {
			return js5Agent.doErr(10*time.Second, map[string]any{"cmd": "emit", "from": from, "n": n})
		},
		js3: func(from, n int) error {
			return js3Agent.doErr(10*time.Second, map[string]any{"cmd": "emit", "from": from, "n": n})
		},
	}
	// Agents that answer requests with results (MQTT 5 and WebSocket);
	// the 3.1.1 agent cannot see a Response Topic.
	invocable := []string{goMQ, js5, goWS}
	things := []string{goMQ, js5, js3, goWS}

	// Consumers.
	hc := &httpScenario{h: h, l: l}
	defer hc.close()
	wc, err := dialWSScenario(h, l)
	if err != nil {
		t.Fatal(err)
	}
	pc := &pahoScenario{h: h, l: l, clientID: "scenario-paho", pending: map[string]chan *paho.Publish{}, topics: map[string]func(*paho.Publish){}}
	if err := pc.connect(); err != nil {
		t.Fatal(err)
	}
	jc := newJSScenario(startScript(t, ctx, "mqtt.js consumer", "mqttjs-consumer.mjs", mqttURL), l)
	consumers := []scenarioConsumer{hc, wc, pc, jc}
	watchAll := func(things ...string) {
		t.Helper()
		for _, c := range consumers {
			for _, th := range things {
				if err := c.subscribe(th); err != nil {
					t.Fatalf("%s subscribe %s: %v", c.name(), th, err)
				}
				if err := c.observe(th); err != nil {
					t.Fatalf("%s observe %s: %v", c.name(), th, err)
				}
			}
		}
	}
	watchAll(things...)

	const rounds, perPair, ticks = 4, 4, 8
	for r := range rounds {
		// Jobs run interleaved, one queue per client: a client's own jobs
		// run one after the other (the mqtt.js script takes its commands
		// one by one).
		queues := map[string][]func() error{}
		// Writes: this round's writer consumer sets every Thing's level.
		writer := consumers[r%len(consumers)]
		for i, th := range things {
			v := float64(100*(r+1) + i)
			l.mu.Lock()
			l.written[th] = append(l.written[th], v)
			l.mu.Unlock()
			queues[writer.name()] = append(queues[writer.name()], func() error { return writer.write(th, v) })
		}
		// Invocations: every consumer invokes every answering agent; the
		// HTTP, WebSocket and paho consumers three at a time each.
		for ci, c := range consumers {
			for _, th := range invocable {
				tt := tags(fmt.Sprintf("r%d-%s-%s", r, c.name(), th[len("urn:example:sc-"):]), perPair)
				n, qos := 1+(r+ci)%3, (r+ci)%2
				queues[c.name()] = append(queues[c.name()], func() error { return c.invoke(th, tt, n, qos) })
			}
		}
		// Events: every agent emits its next ticks.
		for _, th := range things {
			l.mu.Lock()
			from := len(l.emitted[th])
			for i := range ticks {
				l.emitted[th] = append(l.emitted[th], from+i)
			}
			l.mu.Unlock()
			queues[th] = append(queues[th], func() error { return emitters[th](from, ticks) })
		}
		var owners []string
		for o := range queues {
			owners = append(owners, o)
		}
		byOwner := queues
		if err := inParallel(len(owners), len(owners), func(i int) error {
			var errs []error
			for _, j := range byOwner[owners[i]] {
				errs = append(errs, j())
			}
			return errors.Join(errs...)
		}); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		// Every subscriber and observer catches up.
		var missing []string
		deadline := time.Now().Add(15 * time.Second)
		for {
			if missing = l.missing(); len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, m := range missing {
			t.Errorf("round %d: %s", r, m)
		}
		// Reads answer the level last written.
		for _, c := range []scenarioConsumer{hc, wc} {
			for _, th := range things {
				l.mu.Lock()
				want := l.written[th][len(l.written[th])-1]
				l.mu.Unlock()
				if v, err := c.read(th); err != nil || v != want {
					t.Errorf("round %d: %s reads level %v of %s (%v), want %v", r, c.name(), v, th, err, want)
				}
			}
		}
		l.mu.Lock()
		for _, p := range l.problems {
			t.Errorf("round %d: %s", r, p)
		}
		l.problems = nil
		l.mu.Unlock()
		for _, c := range consumers {
			if err := c.healthy(); err != nil {
				t.Errorf("round %d: %s: %v", r, c.name(), err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}

		switch r {
		case 0: // Reconnects: the network cuts both Go agents; mqtt.js drops its own.
			mqRelay.cut()
			wsRelay.cut()
			if err := js5Agent.doErr(10*time.Second, map[string]any{"cmd": "drop"}); err != nil {
				t.Fatal(err)
			}
			online(goMQ, 2)
			online(goWS, 2)
			online(js5, 2)
		case 1: // Leaves and joins.
			if err := goWSAgent.Close(); err != nil {
				t.Fatal(err)
			}
			js3Agent.exit()
			for _, th := range []string{goWS, js3} {
				waitFor(t, 10*time.Second, th+" offline", func() bool {
					x, err := h.Main.Registry.Get(th)
					return err == nil && x.Meta.Presence.Status == hub.PresenceOffline
				})
			}
			// An offline Thing: refused at once, to every consumer.
			resp, body := h.request("POST", "/proxy/"+pathEscape(goWS)+"/actions/count", "application/json", "", []byte(`{"n":0,"tag":"x"}`), testToken)
			if resp.StatusCode != 503 {
				t.Errorf("invoking the offline %s through the proxy: %d %s", goWS, resp.StatusCode, body)
			}
			if err := wc.invoke(goWS, []string{"offline"}, 0, 0); err == nil || !strings.Contains(err.Error(), "503") {
				t.Errorf("invoking the offline %s over /ws: %v", goWS, err)
			}
			if resp, _ := h.request("GET", "/proxy/"+pathEscape(js3)+"/properties/level", "", "", nil, ""); resp.StatusCode != 503 {
				t.Errorf("reading the offline %s: %d", js3, resp.StatusCode)
			}
			// The WebSocket agent comes back under its id; a new 3.1.1
			// agent joins with the level it had.
			l.mu.Lock()
			last := l.written[goWS][len(l.written[goWS])-1]
			l.mu.Unlock()
			goWSAgent = newGoCounter(t, ctx, agent.Options{URL: "ws://" + wsRelay.addr() + "/ws", Logger: slog.New(goWSLog)}, goWS, last)
			js3Agent = startScript(t, ctx, "mqtt.js agent (v3.1.1, QoS 0) b", "mqttjs-agent.mjs", mqttURL, js3b, "4", "0")
			online(goWS, 3)
			online(js3b, 1)
			emitters[goWS] = func(from, n int) error { return emitGo(goWSAgent, from, n) }
			emitters[js3b] = func(from, n int) error {
				return js3Agent.doErr(10*time.Second, map[string]any{"cmd": "emit", "from": from, "n": n})
			}
			things = []string{goMQ, js5, js3b, goWS}
			watchAll(js3b)
		case 2: // The paho consumer reconnects; its subscriptions are renewed.
			if err := pc.reconnect(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Everybody stayed healthy: the clients reported nothing, the agents
	// logged no warning but the reconnects the cuts caused.
	for _, c := range consumers {
		if err := c.healthy(); err != nil {
			t.Errorf("%s: %v", c.name(), err)
		}
	}
	for name, w := range map[string]*warnings{goMQ: goMQLog, goWS: goWSLog} {
		w.mu.Lock()
		for _, m := range w.msgs {
			if m != "connection to the hub lost; reconnecting" {
				t.Errorf("agent %s warned: %s", name, m)
			}
		}
		w.mu.Unlock()
	}
	js5Agent.exit()
	js3Agent.exit()
	jc.p.exit()
	l.mu.Lock()
	status.mu.Lock()
	t.Logf("%d invocations checked, %d events and values delivered, status changes %v", l.results, l.delivered, status.seen)
	status.mu.Unlock()
	l.mu.Unlock()
	if err := goMQAgent.Close(); err != nil {
		t.Error(err)
	}
}

func emitGo(a *agent.Agent, from, n int) error {
	for i := from; i < from+n; i++ {
		if err := a.Emit("tick", map[string]any{"seq": i}); err != nil {
			return err
		}
	}
	return nil
}
