package mqtt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	mpackets "github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// joinOwner joins id anonymously and connects with the credentials issued
// (cp may adjust the CONNECT).
func joinOwner(t *testing.T, e *env, id string, cp func(*paho.Connect)) (*client, *credentials) {
	t.Helper()
	res := mustDial(t, e.addr, nil).join(lmos.TopicKey(id), tdgen.MakeTD(id, "A"), "")
	if res.Credentials == nil {
		t.Fatalf("join: %+v", res)
	}
	c := withCreds(res.Credentials)
	if cp != nil {
		cp(c)
	}
	return mustDial(t, e.addr, c), res.Credentials
}

func pubProps(c *client, topic string, payload []byte, qos byte, props *paho.PublishProperties) (*paho.PublishResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.C.Publish(ctx, &paho.Publish{Topic: topic, Payload: payload, QoS: qos, Properties: props})
}

// mustStayJoined checks that id is registered and still holds its credential.
func mustStayJoined(t *testing.T, e *env, id string) {
	t.Helper()
	if _, err := e.reg.Get(id); err != nil {
		t.Fatalf("thing gone: %v", err)
	}
	if _, err := e.db.CredentialHash(id); err != nil {
		t.Fatalf("credential gone: %v", err)
	}
}

// Fix 1: a Response Topic outside lmos/v1/clients/ is refused, so nobody
// can make an agent reply onto its own td (an empty reply deregistering
// it), status, properties or events.
func TestResponseTopicOutsideInboxRefused(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:a"
	tid := lmos.TopicKey(id)
	agent, _ := joinOwner(t, e, id, nil)
	agent.mustSub(lmos.ThingsPrefix + tid + "/properties/+/set")
	agent.mustSub(lmos.ThingsPrefix + tid + "/actions/+")
	consumer := mustDial(t, e.addr, nil)

	for _, rt := range []string{lmos.ThingsPrefix + tid + "/td", lmos.ThingsPrefix + tid + "/status", lmos.ThingsPrefix + tid + "/events/e", "lmos/v1/hub/status", "lmos/v1/clients/", "elsewhere"} {
		props := &paho.PublishProperties{ResponseTopic: rt, CorrelationData: []byte("c")}
		pr, err := pubProps(consumer, lmos.ThingsPrefix+tid+"/properties/mode/set", []byte(`"x"`), 1, props)
		if err == nil || pr == nil || pr.ReasonCode != 0x87 {
			t.Fatalf("QoS 1 with response topic %q: %+v %v", rt, pr, err)
		}
		if _, err := pubProps(consumer, lmos.ThingsPrefix+tid+"/actions/chat", []byte(`{}`), 0, props); err != nil {
			t.Fatal(err)
		}
	}
	agent.none(lmos.ThingsPrefix+tid+"/properties/mode/set", 200*time.Millisecond)
	agent.none(lmos.ThingsPrefix+tid+"/actions/chat", 50*time.Millisecond)

	// An inbox is fine, and the message arrives with it.
	props := &paho.PublishProperties{ResponseTopic: "lmos/v1/clients/c1/r/1", CorrelationData: []byte("c")}
	if _, err := pubProps(consumer, lmos.ThingsPrefix+tid+"/actions/chat", []byte(`{}`), 1, props); err != nil {
		t.Fatal(err)
	}
	if m := agent.next(lmos.ThingsPrefix + tid + "/actions/chat"); m.Properties == nil || m.Properties.ResponseTopic != "lmos/v1/clients/c1/r/1" {
		t.Fatalf("invocation %+v", m)
	}
	mustStayJoined(t, e, id)
}

// Fix 1, belt and braces: an empty td publish carrying Correlation Data is
// a reply, not a deregistration, even from the Thing itself.
func TestEmptyTDReplyIsNotDeregistration(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:a"
	tid := lmos.TopicKey(id)
	agent, _ := joinOwner(t, e, id, nil)
	// Refused while the hub still delivers the join result: retry.
	testwait.Eventually(t, 2*time.Second, "subscribed to td/result", func() bool {
		_, err := agent.sub(lmos.ThingsPrefix + tid + "/td/result")
		return err == nil
	})
	pr, err := pubProps(agent, lmos.ThingsPrefix+tid+"/td", nil, 1, &paho.PublishProperties{CorrelationData: []byte("c")})
	if err == nil || pr == nil || pr.ReasonCode != 0x87 {
		t.Fatalf("empty td reply: %+v %v", pr, err)
	}
	if _, err := pubProps(agent, lmos.ThingsPrefix+tid+"/td", nil, 0, &paho.PublishProperties{CorrelationData: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	agent.none(lmos.ThingsPrefix+tid+"/td/result", 300*time.Millisecond)
	mustStayJoined(t, e, id)
	late := mustDial(t, e.addr, nil)
	late.mustSub(lmos.ThingsPrefix + tid + "/td")
	if m := late.next(lmos.ThingsPrefix + tid + "/td"); !m.Retain || len(m.Payload) == 0 {
		t.Fatalf("retained td: %q (retain %v)", m.Payload, m.Retain)
	}
}

// Fix 2: an MQTT join or deregistration cannot take over a Thing
// registered by other means; deregistration obeys the join mode.
func TestJoinCannotTakeOverThingsRegisteredOtherwise(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:lock"
	if _, err := e.reg.Put(t.Context(), id, tdgen.MakeTD(id, "Door lock"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	before, _ := e.reg.Get(id)
	anon := mustDial(t, e.addr, nil)
	for _, payload := range [][]byte{tdgen.MakeTD(id, "Owned"), nil} {
		res := anon.join(lmos.TopicKey(id), payload, "")
		if res.Status != "rejected" || res.Problem == nil || res.Problem.Status != 403 || res.Credentials != nil {
			t.Fatalf("join %q: %+v", payload, res)
		}
		after, err := e.reg.Get(id)
		if err != nil || after.Summary.Title != "Door lock" || !after.Meta.Modified.Equal(before.Meta.Modified) || after.Meta.Origin.Source != hub.SourceHTTP {
			t.Fatalf("registry changed: %+v %v", after, err)
		}
		if _, err := e.db.CredentialHash(id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Fatalf("credential issued: %v", err)
		}
	}
	// A new id in open mode still joins anonymously.
	if res := anon.join("urn:new", tdgen.MakeTD("urn:new", "N"), ""); res.Status != "accepted" || res.Credentials == nil {
		t.Fatalf("new id: %+v", res)
	}
}

// A closed hub refuses first (telling nothing of which ids exist); under
// approve the takeover rule and the registry answer, as under open.
func TestDeregistrationObeysJoinMode(t *testing.T) {
	for mode, status := range map[string][2]int{"closed": {403, 403}, "approve": {403, 404}} {
		e := newEnvJoin(t, joinPolicy{mode: mode}, nil)
		const id = "urn:lock"
		if _, err := e.reg.Put(t.Context(), id, tdgen.MakeTD(id, "Door lock"), hub.Origin{Source: hub.SourceMDNS}); err != nil {
			t.Fatal(err)
		}
		anon := mustDial(t, e.addr, nil)
		for i, tid := range []string{"urn:lock", "urn:unknown"} {
			res := anon.join(tid, nil, "")
			if res.Status != "rejected" || res.Problem == nil || res.Problem.Status != status[i] {
				t.Fatalf("%s: deregister %s: %+v", mode, tid, res)
			}
		}
		if _, err := e.reg.Get(id); err != nil {
			t.Fatalf("%s: thing gone: %v", mode, err)
		}
	}
}

// Fix 2: a failed credential write leaves no Thing without a credential
// behind (it could never be joined again): the credential is written in
// the Thing's own commit (hub.Admission.Join), so the store failing
// that commit stores neither.
func TestJoinUndoneWhenCredentialFails(t *testing.T) {
	e := newEnv(t, nil)
	e.stop()
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg, err := hub.NewRegistry(failingCreds{db}, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	b, err := New(reg, db, db, Config{Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Serve(); err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	res := mustDial(t, addr.String(), nil).join("urn:a", tdgen.MakeTD("urn:a", "A"), "")
	if res.Status != "rejected" || res.Problem == nil || res.Problem.Status != 500 || res.Credentials != nil {
		t.Fatalf("%+v", res)
	}
	if _, err := reg.Get("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("registered without credential: %v", err)
	}
	if _, err := db.CredentialHash("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("credential stored without its Thing: %v", err)
	}
}

// failingCreds is the store failing every commit that writes a credential.
type failingCreds struct{ *store.DB }

func (s failingCreds) Commit(b *hub.Batch) error {
	if len(b.Credentials) > 0 {
		return errors.New("disk full")
	}
	return s.DB.Commit(b)
}

// Fix 3: nothing anyone may publish is retained: invocations, writes and
// replies (wills too); a Thing's own properties are.
func TestRetainStrippedWhereAnyoneMayPublish(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:a"
	tid := lmos.TopicKey(id)
	anon := mustDial(t, e.addr, nil)
	topics := []string{lmos.ThingsPrefix + tid + "/actions/chat", lmos.ThingsPrefix + tid + "/properties/p/set", "lmos/v1/clients/whatever/x"}
	for _, topic := range topics {
		if _, err := anon.pub(topic, []byte(`{"rm":"-rf"}`), 1, true, ""); err != nil {
			t.Fatal(err)
		}
	}
	// A will in an inbox.
	cp := &paho.Connect{CleanStart: true, WillMessage: &paho.WillMessage{Topic: "lmos/v1/clients/other/w", Payload: []byte("bye"), Retain: true}}
	willer := mustDial(t, e.addr, cp)
	watcher := mustDial(t, e.addr, &paho.Connect{ClientID: "other", CleanStart: true})
	watcher.mustSub("lmos/v1/clients/other/#")
	willer.Conn.Close()
	if m := watcher.next("lmos/v1/clients/other/w"); m.Retain {
		t.Fatal("will delivered as retained")
	}
	topics = append(topics, "lmos/v1/clients/other/w")

	agent, _ := joinOwner(t, e, id, nil)
	agent.mustPub(lmos.ThingsPrefix+tid+"/properties/temp", []byte("21"), 1, true)
	agent.mustPub(lmos.ThingsPrefix+tid+"/actions/self", []byte("1"), 1, true) // not even the owner's
	topics = append(topics, lmos.ThingsPrefix+tid+"/actions/self")
	agent.mustSub(lmos.ThingsPrefix + tid + "/actions/+")
	agent.mustSub(lmos.ThingsPrefix + tid + "/properties/+/set")
	agent.none(lmos.ThingsPrefix+tid+"/actions/chat", 200*time.Millisecond)
	for _, topic := range topics {
		if n := len(e.b.server.Topics.Messages(topic)); n != 0 {
			t.Fatalf("%s: %d retained", topic, n)
		}
	}
	if n := len(e.b.server.Topics.Messages(lmos.ThingsPrefix + tid + "/properties/temp")); n != 1 {
		t.Fatalf("own property: %d retained", n)
	}
	e.restart() // and nothing of it was stored
	for _, topic := range topics {
		if n := len(e.b.server.Topics.Messages(topic)); n != 0 {
			t.Fatalf("%s after restart: %d retained", topic, n)
		}
	}
}

// connectV3 sends a raw MQTT 3.1.1 CONNECT (clean session 0) and returns
// the CONNACK return code.
func connectV3(t *testing.T, addr, clientID string) byte {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0, 0, 30, 0, byte(len(clientID))}
	vh = append(vh, clientID...)
	if _, err := conn.Write(append([]byte{0x10, byte(len(vh))}, vh...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	ack := make([]byte, 4)
	if _, err := io.ReadFull(conn, ack); err != nil {
		t.Fatal(err)
	}
	if ack[0] != 0x20 {
		t.Fatalf("not a CONNACK: % x", ack)
	}
	return ack[3]
}

// Fix 4: a client id is bound to the username that established its
// session, connected or offline, also after a restart.
func TestSessionTakeoverRefused(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:a"
	tid := lmos.TopicKey(id)
	expiry := uint32(3600)
	persistent := func(c *paho.Connect) {
		c.ClientID = "thermo-1"
		c.Properties = &paho.ConnectProperties{SessionExpiryInterval: &expiry}
	}
	agent, creds := joinOwner(t, e, id, persistent)
	agent.mustSub(lmos.ThingsPrefix + tid + "/actions/+")
	_, other := joinOwner(t, e, "urn:b", nil)

	try := func(when string, cp *paho.Connect) {
		t.Helper()
		persistent(cp)
		cp.CleanStart = false
		cl, ack, err := dial(t, e.addr, cp)
		if err == nil {
			cl.close()
			t.Fatalf("%s: took over %+v", when, ack)
		}
		if ack == nil || ack.ReasonCode != 0x85 {
			t.Fatalf("%s: %+v %v", when, ack, err)
		}
		if code := connectV3(t, e.addr, "thermo-1"); code != 0x02 {
			t.Fatalf("%s: v3 return code %#x", when, code)
		}
	}
	try("connected, anonymous", &paho.Connect{})
	try("connected, other Thing", withCreds(other))
	agent.close() // offline; the session stays
	time.Sleep(100 * time.Millisecond)
	mustDial(t, e.addr, nil).mustPub(lmos.ThingsPrefix+tid+"/actions/chat", []byte(`{"pin":1234}`), 1, false)
	try("offline, anonymous", &paho.Connect{})
	try("offline, other Thing", withCreds(other))
	e.restart()
	try("restored, anonymous", &paho.Connect{})
	// The owner resumes and gets what was queued.
	cp := withCreds(creds)
	persistent(cp)
	cp.CleanStart = false
	a, ack, err := dial(t, e.addr, cp)
	if err != nil || !ack.SessionPresent {
		t.Fatalf("owner resume: %+v %v", ack, err)
	}
	if m := a.next(lmos.ThingsPrefix + tid + "/actions/chat"); string(m.Payload) != `{"pin":1234}` {
		t.Fatalf("queued %q", m.Payload)
	}
}

// Fix 4: join results are QoS 0 and never stored as in-flight messages,
// not even ones stored by an older version.
func TestJoinResultNotInflight(t *testing.T) {
	e := newEnv(t, nil)
	expiry := uint32(3600)
	c := mustDial(t, e.addr, &paho.Connect{ClientID: "joiner", CleanStart: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	c.mustSub(lmos.ThingsPrefix + "urn:a/td/result")
	if _, err := c.pub(lmos.ThingsPrefix+"urn:a/td", tdgen.MakeTD("urn:a", "A"), 1, false, ""); err != nil {
		t.Fatal(err)
	}
	if m := c.next(lmos.ThingsPrefix + "urn:a/td/result"); m.QoS != 0 {
		t.Fatalf("td/result at QoS %d", m.QoS)
	}

	// The hook itself refuses to store a td/result in flight.
	p := newPersistence(e.db, e.b.log, time.Hour)
	cl := &mochi.Client{ID: "joiner"}
	cl.Properties.ProtocolVersion = 5
	cl.Properties.Props.SessionExpiryInterval = 3600
	pk := mpackets.Packet{FixedHeader: mpackets.FixedHeader{Type: mpackets.Publish, Qos: 1}, TopicName: lmos.ThingsPrefix + "urn:a/td/result", PacketID: 7, Payload: []byte(`{"credentials":{}}`)}
	p.OnQosPublish(cl, pk, 1, 0)
	if len(p.order) != 0 {
		t.Fatalf("td/result pending for the store: %v", p.order)
	}
	// One written by an older version is dropped at load, and deleted.
	e.stop()
	m := messageOf(cl, pk, inflightKey("joiner", 7))
	m.T = storage.InflightKey
	raw, _ := m.MarshalBinary()
	// A Thing's session (anonymous ones are never restored).
	cm := storage.Client{ID: "joiner", T: storage.ClientKey, Username: []byte("urn:j"), ProtocolVersion: 5, Properties: storage.ClientProperties{SessionExpiryInterval: 3600}}
	rawc, _ := cm.MarshalBinary()
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyBroker([]brokerstate.Record{{Kind: recClient, Key: "joiner", Value: rawc}, {Kind: recInflight, Key: m.ID, Value: raw}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.start()
	if cl, ok := e.b.server.Clients.Get("joiner"); !ok || cl.State.Inflight.Len() != 0 {
		t.Fatalf("restored in flight: %v", ok)
	}
	e.stop()
	db, err = store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.LoadBroker(recInflight, func(key string, value []byte) error {
		if bytes.Contains(value, []byte("td/result")) {
			t.Errorf("td/result still stored: %q", key)
		}
		return nil
	})
}

// Fix 5: after a restart no MQTT client is connected, so no Thing is online
// via mqtt.
func TestPresenceOfflineAfterRestart(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:a"
	tid := lmos.TopicKey(id)
	agent, _ := joinOwner(t, e, id, nil) // no will
	agent.mustPub(lmos.ThingsPrefix+tid+"/status", []byte("online"), 1, true)
	testwait.Eventually(t, 2*time.Second, "online", func() bool { th, _ := e.reg.Get(id); return th.Meta.Presence.Status == hub.PresenceOnline })
	// Another Thing online over another transport keeps its presence.
	if _, err := e.reg.Put(t.Context(), "urn:h", tdgen.MakeTD("urn:h", "H"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.SetPresence(t.Context(), "urn:h", hub.PresenceOnline, hub.SourceHTTP); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if th, _ := e.reg.Get(id); th.Meta.Presence.Status != hub.PresenceOffline || th.Meta.Presence.Via != hub.SourceMQTT {
		t.Fatalf("presence after restart: %+v", th.Meta.Presence)
	}
	if th, _ := e.reg.Get("urn:h"); th.Meta.Presence.Status != hub.PresenceOnline {
		t.Fatalf("http presence: %+v", th.Meta.Presence)
	}
	// MQTT consumers read presence from the retained status: it says so too.
	reader := mustDial(t, e.addr, nil)
	reader.mustSub(lmos.ThingsPrefix + tid + "/status")
	if pk := reader.next(lmos.ThingsPrefix + tid + "/status"); string(pk.Payload) != "offline" || !pk.Retain {
		t.Fatalf("retained status after restart = %q (retain %v)", pk.Payload, pk.Retain)
	}
}

// Fix 6: a Thing deleted while the hub is down has no retained td after
// the restart; one still registered keeps it (served from the registry).
func TestRetainedTDOfThingDeletedWhileDown(t *testing.T) {
	e := newEnv(t, nil)
	anon := mustDial(t, e.addr, nil)
	for _, id := range []string{"urn:gone", "urn:kept"} {
		if res := anon.join(id, tdgen.MakeTD(id, id), ""); res.Status != "accepted" {
			t.Fatalf("%+v", res)
		}
	}
	e.stop()
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Delete(t.Context(), "urn:gone"); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	db.Close()
	e.start()
	for i := range 2 {
		if i > 0 {
			e.restart()
		}
		c := mustDial(t, e.addr, nil)
		c.mustSub(lmos.ThingsPrefix + "+/td")
		if m := c.next(lmos.ThingsPrefix + "urn:kept/td"); !m.Retain {
			t.Fatal("kept: not retained")
		}
		c.none(lmos.ThingsPrefix+"urn:gone/td", 200*time.Millisecond)
		c.close()
	}
}

// A client cannot forge the hub's carrier of will properties on a PUBLISH:
// it would become a Response Topic (here the Thing's own td) that the
// publish-time check never saw.
func TestForgedWillCarrierDropped(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:forge"
	tid := lmos.TopicKey(id)
	owner, _ := joinOwner(t, e, id, nil)
	topic := lmos.ThingsPrefix + tid + "/properties/p"
	props := &paho.PublishProperties{User: paho.UserProperties{{Key: willKey, Value: `{"rt":"lmos/v1/things/` + tid + `/td","ct":"evil"}`}, {Key: "kept", Value: "yes"}}}
	if _, err := owner.C.Publish(t.Context(), &paho.Publish{Topic: topic, Payload: []byte(`1`), QoS: 1, Retain: true, Properties: props}); err != nil {
		t.Fatal(err)
	}
	live := mustDial(t, e.addr, nil)
	live.mustSub(topic)
	if _, err := owner.C.Publish(t.Context(), &paho.Publish{Topic: topic, Payload: []byte(`2`), QoS: 1, Properties: props}); err != nil {
		t.Fatal(err)
	}
	late := mustDial(t, e.addr, nil)
	late.mustSub(topic)
	for name, m := range map[string]*paho.Publish{"retained": live.next(topic), "live": live.next(topic), "retained later": late.next(topic)} {
		if m.Properties.ResponseTopic != "" || m.Properties.ContentType != "" || m.Properties.User.Get("kept") != "yes" || m.Properties.User.Get(willKey) != "" {
			t.Errorf("%s delivery: properties %+v", name, m.Properties)
		}
	}
}
