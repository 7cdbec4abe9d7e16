package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	mpackets "github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// storedTDCopies counts the retained messages on …/td in the broker's
// store (e.dir, the hub stopped).
func storedTDCopies(t *testing.T, dir string) []string {
	t.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var keys []string
	err = db.LoadBroker(recRetained, func(key string, _ []byte) error {
		if tt, ok := parseThingTopic(key); ok && tt.kind == kindTD {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// runSub starts mosquitto_sub with args after -h/-p and returns a function
// waiting for its end (it must exit 0: any protocol error fails the
// test) that returns its output lines.
func runSub(t *testing.T, e *env, args ...string) func() []string {
	t.Helper()
	bin := requireBin(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return func() []string {
		t.Helper()
		defer cancel()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mosquitto_sub %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		s := strings.TrimRight(out.String(), "\n")
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
}

// awaitSubscriber waits until topic has n subscribers.
func awaitSubscriber(t *testing.T, e *env, topic string, n int) {
	t.Helper()
	testwait.Eventually(t, 15*time.Second, "subscribed", func() bool { return e.b.Subscribers(topic) >= n })
}

// The descriptions on …/td are served from the registry, never stored in
// the broker (issue 12, point 2: memory at start bounded by the summaries,
// not the documents). Joins, a replacement and a deregistration leave no
// retained …/td message in mochi's retained store nor in the broker store.
func TestNoRetainedTDCopiesAfterJoins(t *testing.T) {
	e := newEnv(t, nil)
	var creds []*credentials
	for i := range 4 {
		creds = append(creds, e.thing(t, fmt.Sprintf("urn:copy:%d", i)))
	}
	c := mustDial(t, e.addr, withCreds(creds[0]))
	if res := c.join(creds[0].Username, tdgen.MakeTD("urn:copy:0", "replaced"), ""); res.Status != "accepted" {
		t.Fatalf("replace: %+v", res)
	}
	c.close()
	c = mustDial(t, e.addr, withCreds(creds[1]))
	if res := c.join(creds[1].Username, nil, ""); res.Status != "deleted" {
		t.Fatalf("deregister: %+v", res)
	}
	c.close()
	if ms := e.b.server.Topics.Messages(lmos.ThingsPrefix + "+/td"); len(ms) != 0 {
		t.Errorf("mochi retains %d messages on …/td", len(ms))
	}
	// An exact subscription still gets the Thing's description, retained.
	late := mustDial(t, e.addr, nil)
	late.mustSub(lmos.ThingsPrefix + "urn:copy:0/td")
	raw, _ := e.reg.Raw("urn:copy:0")
	if m := late.next(lmos.ThingsPrefix + "urn:copy:0/td"); !m.Retain || !bytes.Equal(m.Payload, raw) ||
		m.Properties == nil || m.Properties.ContentType != tdContentType {
		t.Errorf("retained td %q (retain %v, props %+v)", m.Payload, m.Retain, m.Properties)
	}
	late.close()
	e.stop()
	if keys := storedTDCopies(t, e.dir); len(keys) != 0 {
		t.Errorf("the broker store holds retained …/td copies: %v", keys)
	}
}

// After a crash or a restart, a subscriber to lmos/v1/things/+/td gets
// exactly the registry's current description of each Thing joined over
// MQTT: copies planted in the broker store as earlier versions kept them
// (stale, of a Thing no longer registered, of one registered over HTTP)
// are deleted at start, from memory and from the store. mosquitto_sub
// with --retained-only exits on the first message without the retain
// flag: a live join ends it, so every retained message before is counted.
func TestRetainedTDsFromRegistryAfterRestart(t *testing.T) {
	e := newEnv(t, nil)
	ids := []string{"urn:r1", "urn:r2", "urn:r3"}
	var creds []*credentials
	for _, id := range ids {
		creds = append(creds, e.thing(t, id))
	}
	old := tdgen.MakeTD("urn:r2", "urn:r2")
	c := mustDial(t, e.addr, withCreds(creds[1]))
	if res := c.join("urn:r2", tdgen.MakeTD("urn:r2", "R2 replaced"), ""); res.Status != "accepted" {
		t.Fatalf("replace: %+v", res)
	}
	c.close()
	if _, err := e.reg.Put(t.Context(), "urn:http", tdgen.MakeTD("urn:http", "H"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	// Replaced over HTTP (an admin's PUT): its origin is http now, but it
	// holds its credential and stays a Thing joined over MQTT.
	if _, err := e.reg.Put(t.Context(), "urn:r3", tdgen.MakeTD("urn:r3", "R3 over HTTP"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	e.stop()

	retained := func(topic string, payload []byte) brokerstate.Record {
		m := storage.Message{ID: topic, T: storage.RetainedKey, TopicName: topic, Payload: payload,
			FixedHeader: mpackets.FixedHeader{Type: mpackets.Publish, Qos: 1, Retain: true}}
		raw, _ := m.MarshalBinary()
		return brokerstate.Record{Kind: recRetained, Key: topic, Value: raw}
	}
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyBroker([]brokerstate.Record{
		retained(lmos.ThingsPrefix+"urn:r1/td", tdgen.MakeTD("urn:r1", "not this one")),
		retained(lmos.ThingsPrefix+"urn:r2/td", old), // stale
		retained(lmos.ThingsPrefix+"urn:gone/td", tdgen.MakeTD("urn:gone", "G")),
		retained(lmos.ThingsPrefix+"urn:http/td", tdgen.MakeTD("urn:http", "H")),
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.start()
	if ms := e.b.server.Topics.Messages(lmos.ThingsPrefix + "+/td"); len(ms) != 0 {
		t.Errorf("mochi loaded %d retained messages on …/td", len(ms))
	}

	const live = "urn:live"
	wait := runSub(t, e, "-V", "mqttv5", "-q", "1", "--retained-only", "-v", "-t", lmos.ThingsPrefix+"+/td")
	awaitSubscriber(t, e, lmos.ThingsPrefix+live+"/td", 1)
	e.thing(t, live)
	got := wait()
	slices.Sort(got)
	var want []string
	for _, id := range ids {
		raw, err := e.reg.Raw(id)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, lmos.ThingsPrefix+id+"/td "+string(raw))
	}
	if !slices.Equal(got, want) {
		t.Errorf("retained descriptions after the restart:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	e.stop()
	if keys := storedTDCopies(t, e.dir); len(keys) != 0 {
		t.Errorf("copies left in the broker store: %v", keys)
	}
}

// A wildcard subscriber gets every joined Thing's description once, with
// the retain flag, then a live join and a live deregistration without it
// (the empty payload), MQTT 3.1.1 (QoS 0) and 5 (QoS 1, Content Type).
func TestRetainedTDsWildcardThenLive(t *testing.T) {
	e := newEnv(t, nil)
	ids := []string{"urn:w:a", "https://example.com/things/b", "urn:w:c"}
	for _, id := range ids {
		e.thing(t, id)
	}
	if _, err := e.reg.Put(t.Context(), "urn:w:http", tdgen.MakeTD("urn:w:http", "H"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	for i, v := range []struct{ version, qos, ct string }{{"mqttv311", "0", ""}, {"mqttv5", "1", tdContentType}} {
		live := fmt.Sprintf("urn:w:live%d", i)
		liveKey := lmos.TopicKey(live)
		// The previous round's mosquitto_sub has exited; wait until the
		// broker has seen it go, so the count below is this round's.
		testwait.Eventually(t, 15*time.Second, "previous subscriber gone", func() bool { return e.b.Subscribers(lmos.ThingsPrefix+liveKey+"/td") == 0 })
		n := 0
		wait := runSub(t, e, "-V", v.version, "-q", v.qos, "-C", fmt.Sprint(len(ids)+2), "-W", "10",
			"-F", "%r %q [%C] %t %p", "-t", "lmos/v1/things/+/td")
		awaitSubscriber(t, e, lmos.ThingsPrefix+liveKey+"/td", n+1)
		cred := e.thing(t, live)
		c := mustDial(t, e.addr, withCreds(cred))
		if res := c.join(liveKey, nil, ""); res.Status != "deleted" {
			t.Fatalf("deregister: %+v", res)
		}
		c.close()
		got := wait()
		var want []string
		for _, id := range ids {
			raw, _ := e.reg.Raw(id)
			want = append(want, fmt.Sprintf("1 %s [%s] %s%s/td %s", v.qos, v.ct, lmos.ThingsPrefix, lmos.TopicKey(id), raw))
		}
		slices.Sort(want)
		if len(got) != len(ids)+2 {
			t.Fatalf("%s: %d messages:\n%s", v.version, len(got), strings.Join(got, "\n"))
		}
		retainedPart := slices.Clone(got[:len(ids)])
		slices.Sort(retainedPart)
		if !slices.Equal(retainedPart, want) {
			t.Errorf("%s retained:\n%s\nwant:\n%s", v.version, strings.Join(retainedPart, "\n"), strings.Join(want, "\n"))
		}
		rawLive := tdgen.MakeTD(live, live)
		if w := fmt.Sprintf("0 %s [%s] %s%s/td %s", v.qos, v.ct, lmos.ThingsPrefix, liveKey, rawLive); got[len(ids)] != w {
			t.Errorf("%s live join:\n%s\nwant\n%s", v.version, got[len(ids)], w)
		}
		if w := fmt.Sprintf("0 %s [] %s%s/td ", v.qos, lmos.ThingsPrefix, liveKey); got[len(ids)+1] != w {
			t.Errorf("%s live deregistration: %q, want %q", v.version, got[len(ids)+1], w)
		}
	}
}

func TestTDFilterMatching(t *testing.T) {
	tests := []struct {
		filter string
		tid    string
		exact  bool
		ok     bool
	}{
		{"lmos/v1/things/urn:a/td", "urn:a", true, true},
		{"lmos/v1/things/urn:a/#", "urn:a", true, true},
		{"lmos/v1/things/+/td", "", false, true},
		{"lmos/v1/things/+/+", "", false, true},
		{"lmos/v1/things/+/td/#", "", false, true},
		{"lmos/v1/things/+/status", "", false, false},
		{"lmos/v1/things/+/td/result", "", false, false},
		{"lmos/v1/things/+", "", false, false},
		{"lmos/v1/things/#", "", false, true},
		{"lmos/+/things/+/td", "", false, true},
		{"#", "", false, true},
		{"+/+/+/+/+", "", false, true},
		{"+/+/+/+", "", false, false},
		{"lmos/v1/hub/#", "", false, false},
		{"lmos/v1/things", "", false, false},
	}
	for _, tt := range tests {
		tid, exact, ok := tdFilterThing(tt.filter)
		if tid != tt.tid || exact != tt.exact || ok != tt.ok {
			t.Errorf("tdFilterThing(%q) = %q %v %v, want %q %v %v", tt.filter, tid, exact, ok, tt.tid, tt.exact, tt.ok)
		}
	}
	for _, tt := range []struct {
		filter, topic string
		match         bool
	}{
		{"a/+/c", "a/b/c", true},
		{"a/#", "a", true},
		{"a/b/#", "a/b/c/d", true},
		{"a/+", "a/b/c", false},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
		{"+", "a", true},
		{"a/+/#", "a/b", true},
	} {
		if got := topicMatches(tt.filter, tt.topic); got != tt.match {
			t.Errorf("topicMatches(%q, %q) = %v", tt.filter, tt.topic, got)
		}
	}
}
