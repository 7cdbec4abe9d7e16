package mqtt

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	"github.com/eclipse/paho.golang/paho"
	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

func TestJoinIssuesCredentialsAndPresence(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:uuid:0c2a9b7e-0000-4000-8000-000000000001"
	tid := lmos.TopicKey(id)
	anon := mustDial(t, e.addr, nil)
	res := anon.join(tid, tdgen.MakeTD(id, "Agent"), "")
	if res.Status != "accepted" || res.ID != id || res.Credentials == nil || res.Credentials.Username != tid || len(res.Credentials.Password) != 43 {
		t.Fatalf("join result %+v", res)
	}
	if th, err := e.reg.Get(id); err != nil || th.Meta.Origin.Source != hub.SourceMQTT {
		t.Fatalf("registry: %+v %v", th, err)
	}

	// Wrong password: refused with 0x86.
	bad := *res.Credentials
	bad.Password = "nope"
	if _, ack, err := dial(t, e.addr, withCreds(&bad)); err == nil || ack == nil || ack.ReasonCode != 0x86 {
		t.Fatalf("wrong password: ack %+v err %v", ack, err)
	}

	// The Thing reconnects with its credentials and a will, goes online.
	cp := withCreds(res.Credentials)
	cp.WillMessage = &paho.WillMessage{Topic: lmos.ThingsPrefix + tid + "/status", Payload: []byte("offline"), Retain: true, QoS: 1}
	th := mustDial(t, e.addr, cp)
	th.mustPub(lmos.ThingsPrefix+tid+"/status", []byte("online"), 1, true)
	testwait.Eventually(t, time.Second, "presence online", func() bool {
		got, _ := e.reg.Get(id)
		return got.Meta.Presence.Status == hub.PresenceOnline && got.Meta.Presence.Via == hub.SourceMQTT
	})

	// A re-join by the Thing itself gets no new credentials.
	if res := th.join(tid, tdgen.MakeTD(id, "Agent v2"), ""); res.Status != "accepted" || res.Credentials != nil {
		t.Fatalf("re-join %+v", res)
	}
	// Nobody else may replace it.
	if res := anon.join(tid, tdgen.MakeTD(id, "Impostor"), ""); res.Status != "rejected" || res.Problem == nil || res.Problem.Status != 403 {
		t.Fatalf("impostor join %+v", res)
	}
	if got, _ := e.reg.Get(id); got.Summary.Title != "Agent v2" {
		t.Fatalf("title %v", got.Summary.Title)
	}

	// Kill the connection without DISCONNECT: the will sets it offline.
	th.Conn.Close()
	testwait.Eventually(t, time.Second, "presence offline", func() bool {
		got, _ := e.reg.Get(id)
		return got.Meta.Presence.Status == hub.PresenceOffline
	})
}

func TestJoinResultOnlyToPublisher(t *testing.T) {
	e := newEnv(t, nil)
	spy := mustDial(t, e.addr, nil)
	spy.mustSub("lmos/v1/things/+/td/result")
	spy.mustSub("lmos/v1/things/urn:a/td/result")
	joiner := mustDial(t, e.addr, nil)
	if res := joiner.join("urn:a", tdgen.MakeTD("urn:a", "A"), ""); res.Credentials == nil {
		t.Fatalf("no credentials: %+v", res)
	}
	spy.none("lmos/v1/things/urn:a/td/result", 200*time.Millisecond)
	// The accepted TD itself is retained for everyone.
	late := mustDial(t, e.addr, nil)
	late.mustSub("lmos/v1/things/+/td")
	if m := late.next("lmos/v1/things/urn:a/td"); !strings.Contains(string(m.Payload), `"urn:a"`) {
		t.Fatalf("retained td %s", m.Payload)
	}
}

func TestJoinRejectsBadInput(t *testing.T) {
	e := newEnv(t, nil)
	c := mustDial(t, e.addr, nil)
	valid := tdgen.MakeTD("urn:a", "A")
	var doc map[string]any
	json.Unmarshal(valid, &doc)
	delete(doc, "title")
	invalid, _ := json.Marshal(doc)
	tests := []struct {
		name, tid   string
		payload     []byte
		contentType string
		status      int
		field       string
	}{
		{"malformed JSON", "urn:a", []byte(`{"id": "urn:a",`), "", 400, ""},
		{"invalid TD", "urn:a", invalid, "", 400, "/title"},
		{"id mismatch", "urn:b", valid, "", 400, "/id"},
		{"non-canonical topic key", "urn:%61", tdgen.MakeTD("urn:a", "A"), "", 400, ""},
		{"CBOR nesting bomb", "urn:a", cborBomb(10000), "application/cbor", 400, ""},
		{"CBOR huge map", "urn:a", cborHugeMap(1 << 30), "application/cbor", 400, ""},
		{"CBOR array", "urn:a", mustCBOR(t, []any{1, 2}), "application/cbor", 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			res := c.join(tt.tid, tt.payload, tt.contentType)
			if res.Status != "rejected" || res.Problem == nil || res.Problem.Status != tt.status || res.Credentials != nil {
				t.Fatalf("result %+v", res)
			}
			if !strings.HasPrefix(res.Problem.Type, lmos.ErrorTypeBase) || res.Problem.Title == "" || res.Problem.Detail == "" {
				t.Fatalf("problem %+v", res.Problem)
			}
			if tt.field != "" && (len(res.Problem.ValidationErrors) == 0 || res.Problem.ValidationErrors[0].Field != tt.field) {
				t.Fatalf("validation errors %+v, want %s", res.Problem.ValidationErrors, tt.field)
			}
		})
	}
	c.t = t
	if n := e.reg.Count(); n != 0 {
		t.Fatalf("registry has %d things", n)
	}
	for _, id := range []string{"urn:a", "urn:b"} {
		if _, err := e.db.CredentialHash(id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Fatalf("credential for %s: %v", id, err)
		}
	}
	// Nothing was retained on the td topics.
	late := mustDial(t, e.addr, nil)
	late.mustSub("lmos/v1/things/+/td")
	late.none("lmos/v1/things/urn:a/td", 200*time.Millisecond)
}

func mustCBOR(t *testing.T, v any) []byte {
	b, err := cbor.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJoinCBOR(t *testing.T) {
	e := newEnv(t, nil)
	var doc map[string]any
	json.Unmarshal(tdgen.MakeTD("urn:c", "CBOR agent"), &doc)
	res := mustDial(t, e.addr, nil).join("urn:c", mustCBOR(t, doc), "application/cbor")
	if res.Status != "accepted" {
		t.Fatalf("%+v", res)
	}
	if th, err := e.reg.Get("urn:c"); err != nil || th.Summary.Title != "CBOR agent" {
		t.Fatalf("%+v %v", th, err)
	}
}

// (Join mode approve parks a join instead: approve_test.go.)
func TestJoinModes(t *testing.T) {
	for mode, status := range map[string]int{"closed": 403} {
		e := newEnvJoin(t, joinPolicy{mode: mode}, nil)
		res := mustDial(t, e.addr, nil).join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
		if res.Status != "rejected" || res.Problem == nil || res.Problem.Status != status {
			t.Fatalf("%s: %+v", mode, res)
		}
		if e.reg.Count() != 0 {
			t.Fatalf("%s: registered", mode)
		}
		// Counted by reason: the problem code, as no configured limit refused it.
		reason := map[int]string{403: hub.EFORBIDDEN, 503: hub.EUNAVAILABLE}[status]
		if n := e.b.Refused(reason); n != 1 {
			t.Fatalf("%s: %d refusals counted for %q, want 1", mode, n, reason)
		}
		var m strings.Builder
		e.b.WritePrometheus(&m)
		if want := fmt.Sprintf("lmos_mqtt_refused_total{reason=%q} 1\n", reason); !strings.Contains(m.String(), want) {
			t.Fatalf("%s: metrics lack %q:\n%s", mode, want, m.String())
		}
	}
}

func TestDeregister(t *testing.T) {
	e := newEnv(t, nil)
	anon := mustDial(t, e.addr, nil)
	res := anon.join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
	// Anonymous delete of a credential-bound Thing: refused.
	if del := anon.join("urn:a", nil, ""); del.Status != "rejected" || del.Problem.Status != 403 {
		t.Fatalf("anonymous delete %+v", del)
	}
	if _, err := e.reg.Get("urn:a"); err != nil {
		t.Fatalf("thing gone: %v", err)
	}
	owner := mustDial(t, e.addr, withCreds(res.Credentials))
	if del := owner.join("urn:a", nil, ""); del.Status != "deleted" || del.ID != "urn:a" {
		t.Fatalf("owner delete %+v", del)
	}
	if _, err := e.reg.Get("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("still registered: %v", err)
	}
	if _, err := e.db.CredentialHash("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("credential kept: %v", err)
	}
	// The old credentials no longer connect.
	if _, ack, err := dial(t, e.addr, withCreds(res.Credentials)); err == nil {
		t.Fatalf("connected with deleted credentials: %+v", ack)
	}
}

func TestACLOverTheWire(t *testing.T) {
	e := newEnv(t, nil)
	anon := mustDial(t, e.addr, nil)
	res := anon.join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
	a := mustDial(t, e.addr, withCreds(res.Credentials))
	watcher := mustDial(t, e.addr, nil)
	watcher.mustSub("lmos/v1/things/+/status")
	watcher.mustSub("lmos/v1/things/+/events/+")

	// Publishing under another Thing's topics: 0x87, still connected.
	for _, topic := range []string{"lmos/v1/things/urn:b/status", "lmos/v1/things/urn:b/events/e", "lmos/v1/hub/status"} {
		pr, err := a.pub(topic, []byte("offline"), 1, true, "")
		if err == nil || pr == nil || pr.ReasonCode != 0x87 {
			t.Fatalf("publish %s: %+v %v", topic, pr, err)
		}
	}
	// QoS 0 denied: silently dropped.
	if _, err := anon.pub("lmos/v1/things/urn:a/status", []byte("offline"), 0, false, ""); err != nil {
		t.Fatal(err)
	}
	// Then something allowed arrives: the connection is still up.
	a.mustPub("lmos/v1/things/urn:a/events/e", []byte(`{"x":1}`), 1, false)
	watcher.next("lmos/v1/things/urn:a/events/e")
	watcher.none("lmos/v1/things/urn:b/status", 100*time.Millisecond)

	// Subscribing to another Thing's actions: SUBACK 0x87.
	for _, f := range []string{"lmos/v1/things/urn:b/actions/+", "lmos/v1/things/+/actions/+", "lmos/v1/#", "$SYS/#", "lmos/v1/groups/g/#"} {
		sa, err := a.sub(f)
		if err == nil || sa == nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 0x87 {
			t.Fatalf("subscribe %s: %+v %v", f, sa, err)
		}
	}
	// Its own actions: allowed, also shared; invocations arrive.
	a.mustSub("lmos/v1/things/urn:a/actions/+")
	a.mustSub("$share/workers/lmos/v1/things/urn:a/properties/+/set")
	anon.mustPub("lmos/v1/things/urn:a/actions/chat", []byte(`{}`), 1, false)
	a.next("lmos/v1/things/urn:a/actions/chat")
	anon.mustPub("lmos/v1/things/urn:a/properties/p/set", []byte(`1`), 1, false)
	a.next("lmos/v1/things/urn:a/properties/p/set")
}

// TestWillOnOtherThingDropped: a will is checked like a publish.
func TestWillOnOtherThingDropped(t *testing.T) {
	e := newEnv(t, nil)
	anon := mustDial(t, e.addr, nil)
	anon.join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
	watcher := mustDial(t, e.addr, nil)
	watcher.mustSub("lmos/v1/things/+/status")
	cp := &paho.Connect{CleanStart: true, WillMessage: &paho.WillMessage{Topic: "lmos/v1/things/urn:a/status", Payload: []byte("offline")}}
	evil := mustDial(t, e.addr, cp)
	evil.Conn.Close()
	watcher.none("lmos/v1/things/urn:a/status", 300*time.Millisecond)
}

func TestHubStatusAndEvents(t *testing.T) {
	e := newEnv(t, nil)
	c := mustDial(t, e.addr, nil)
	c.mustSub(TopicHubStatus)
	m := c.next(TopicHubStatus)
	var st map[string]string
	if err := json.Unmarshal(m.Payload, &st); err != nil || st["status"] != "online" || st["version"] != "test" || st["directory"] != e.cfg.DirectoryURL {
		t.Fatalf("hub status %s", m.Payload)
	}
	c.mustSub(TopicHubEvents)
	if _, err := e.reg.Put(t.Context(), "urn:h", tdgen.MakeTD("urn:h", "H"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	m = c.next(TopicHubEvents)
	var ev map[string]any
	if err := json.Unmarshal(m.Payload, &ev); err != nil || ev["type"] != "thing_created" || ev["id"] != "urn:h" || ev["seq"] == nil || ev["time"] == nil {
		t.Fatalf("event %s", m.Payload)
	}
	if err := e.reg.SetPresence(t.Context(), "urn:h", hub.PresenceOnline, hub.SourceHTTP); err != nil {
		t.Fatal(err)
	}
	m = c.next(TopicHubEvents)
	if !strings.Contains(string(m.Payload), `"presence":{"status":"online"`) {
		t.Fatalf("presence event %s", m.Payload)
	}
}

func TestRetainedAndSessionsSurviveRestart(t *testing.T) {
	e := newEnv(t, nil)
	anon := mustDial(t, e.addr, nil)
	res := anon.join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
	a := mustDial(t, e.addr, withCreds(res.Credentials))
	a.mustPub("lmos/v1/things/urn:a/properties/temp", []byte("21.5"), 1, true)

	// A persistent session subscribed to events, then offline. Sessions
	// persist for identities only: the watcher is a Thing.
	persist := persistentAs(e.thing(t, "urn:watcher"), "watcher-1", 3600)
	w := mustDial(t, e.addr, persist)
	w.mustSub("lmos/v1/things/urn:a/events/+")
	w.close()

	e.restart()

	// Hub status was offline at Close, online again now.
	c := mustDial(t, e.addr, nil)
	c.mustSub("lmos/v1/things/urn:a/properties/temp")
	if m := c.next("lmos/v1/things/urn:a/properties/temp"); string(m.Payload) != "21.5" {
		t.Fatalf("retained %q", m.Payload)
	}
	c.mustSub("lmos/v1/things/+/td")
	c.next("lmos/v1/things/urn:a/td")

	// The session kept its subscription: a QoS 1 event published while it
	// is away is delivered when it resumes.
	a = mustDial(t, e.addr, withCreds(res.Credentials))
	a.mustPub("lmos/v1/things/urn:a/events/alarm", []byte("hot"), 1, false)
	persist.CleanStart = false
	w, ack, err := dial(t, e.addr, persist)
	if err != nil || !ack.SessionPresent {
		t.Fatalf("resume: %+v %v", ack, err)
	}
	if m := w.next("lmos/v1/things/urn:a/events/alarm"); string(m.Payload) != "hot" {
		t.Fatalf("event %q", m.Payload)
	}
}

// TestOversizePacket: a packet over MaxPacketSize closes the connection;
// nothing of it is kept and the broker serves on.
func TestOversizePacket(t *testing.T) {
	e := newEnv(t, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// MQTT 3.1.1 CONNECT, clean session, client id "big".
	conn.Write([]byte{0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 3, 'b', 'i', 'g'})
	r := bufio.NewReader(conn)
	ack := make([]byte, 4)
	if _, err := io.ReadFull(r, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("connack %x %v", ack, err)
	}
	topic := "lmos/v1/things/urn:a/td"
	remaining := 2 + len(topic) + MaxPacketSize // one packet over the limit
	hdr := []byte{0x31}                         // PUBLISH, QoS 0, retain
	for n := remaining; ; {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			hdr = append(hdr, b|0x80)
			continue
		}
		hdr = append(hdr, b)
		break
	}
	conn.Write(hdr)
	conn.Write([]byte{0, byte(len(topic))})
	conn.Write([]byte(topic))
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	conn.Write(make([]byte, 4096)) // the broker stops reading after the header
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection not closed: %v", err)
	}
	c := mustDial(t, e.addr, nil)
	c.mustSub("lmos/v1/things/+/td")
	c.none(topic, 100*time.Millisecond)
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe"))
}

// TestAnonymousOff: without mqtt.anonymous only credentials connect.
func TestAnonymousOff(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Anonymous = false })
	if _, ack, err := dial(t, e.addr, nil); err == nil || ack == nil || ack.ReasonCode != 0x86 {
		t.Fatalf("anonymous connect: %+v %v", ack, err)
	}
}

// BenchmarkJoin measures a join round trip from one client: PUBLISH of the
// TD, validation, durable registry write, credential write, result.
func BenchmarkJoin(b *testing.B) {
	e := newEnv(b, nil)
	c := mustDial(b, e.addr, nil)
	c.mustSub("lmos/v1/things/+/td/result")
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("urn:bench:%d", i)
		if _, err := c.pub(lmos.ThingsPrefix+id+"/td", tdgen.MakeTD(id, "Bench"), 1, false, ""); err != nil {
			b.Fatal(err)
		}
		c.next(lmos.ThingsPrefix + id + "/td/result")
	}
}

// A will with a Will Delay Interval sets the Thing offline once the delay
// is over, or as soon as its session ends, whichever comes first (MQTT 5
// §3.1.3.2.2): a clean-start session ends with its connection, so its will
// goes out then, and a clean start with the client id within the delay
// ends the session it waited in. Resuming the session within the delay
// cancels it [MQTT-3.1.3-9]. (mochi's loop, mqtt.connLoop: mochi, keeps a
// will for its delay whatever the session does: PROTOCOL §10.)
func TestDelayedWillSetsOffline(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name       string
		persistent bool // a session that outlives the connection
		reconnect  bool
		offline    bool
	}{
		{"vanishes", false, false, true},
		{"persistent vanishes", true, false, true},
		{"comes back", true, true, false},
		{"clean start ends the session", false, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "urn:delayed-" + strings.ReplaceAll(c.name, " ", "-")
			tid := lmos.TopicKey(id)
			_, creds := joinOwner(t, e, id, nil)
			connect := func(will bool) *client {
				cp := withCreds(creds)
				cp.ClientID = "agent-" + tid
				if c.persistent {
					expiry := uint32(60)
					cp.CleanStart = false
					cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &expiry}
				}
				if will {
					cp.WillMessage = &paho.WillMessage{Topic: lmos.ThingsPrefix + tid + "/status", Payload: []byte("offline"), Retain: true, QoS: 1}
					cp.WillProperties = &paho.WillProperties{WillDelayInterval: ptr(uint32(2))}
				}
				return mustDial(t, e.addr, cp)
			}
			th := connect(true)
			th.mustPub(lmos.ThingsPrefix+tid+"/status", []byte("online"), 1, true)
			testwait.Eventually(t, time.Second, "online", func() bool {
				got, _ := e.reg.Get(id)
				return got.Meta.Presence.Status == hub.PresenceOnline
			})
			th.Conn.Close() // no DISCONNECT: the will is due in 2 s, or when the session ends
			if c.reconnect {
				connect(false)
			}
			if !c.offline {
				time.Sleep(3 * time.Second) // past the delay
				if got, _ := e.reg.Get(id); got.Meta.Presence.Status != hub.PresenceOnline {
					t.Fatalf("a cancelled will set %+v", got.Meta.Presence)
				}
				if n := waitingWills(e); n != 0 {
					t.Fatalf("%d delayed wills left", n)
				}
				return
			}
			if c.persistent {
				// Counted while it waits (lmos_mqtt_delayed_wills).
				testwait.Eventually(t, time.Second, "the will waiting", func() bool { return waitingWills(e) == 1 })
			}
			testwait.Eventually(t, 5*time.Second, "offline after the will delay", func() bool {
				got, _ := e.reg.Get(id)
				return got.Meta.Presence.Status == hub.PresenceOffline && got.Meta.Presence.Via == hub.SourceMQTT
			})
			if n := waitingWills(e); n != 0 {
				t.Fatalf("%d delayed wills left", n)
			}
		})
	}
}

// waitingWills is the broker's lmos_mqtt_delayed_wills.
func waitingWills(e *env) int {
	var w strings.Builder
	e.b.WritePrometheus(&w)
	for line := range strings.Lines(w.String()) {
		if v, ok := strings.CutPrefix(line, "lmos_mqtt_delayed_wills "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}
