package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// pahoTheftScript: argv host port rounds. Each round an honest agent
// (Python paho 1.6.1, MQTT 5, clean start) joins urn:theft:{round}
// anonymously with client id victim-{round}; 0, 1 or 2 ms after the hub
// acknowledged its TD an attacker (paho, MQTT 5 and 3.1.1 in turn)
// connects with the same client id and Clean Start 0 (a session kept an
// hour), subscribes to every td/result and publishes a TD of the same
// Thing itself: its own result (rejected, from the same join worker)
// comes after the agent's, so once it is in the attacker has seen all it
// could see. The attacker then tries to log in with every credential it
// received. One JSON line per round.
const pahoTheftScript = `
import sys, json, queue, time
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
host, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def td(i):
    return json.dumps({"@context": "https://www.w3.org/2022/wot/td/v1.1", "id": "urn:theft:%d" % i, "title": "T%d" % i,
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}}, "security": "nosec_sc"})
def login(creds):
    q = queue.Queue()
    c = mqtt.Client(client_id="", protocol=mqtt.MQTTv5)
    c.username_pw_set(creds["username"], creds["password"])
    c.on_connect = lambda c, u, f, rc, p=None: q.put(rc.value if hasattr(rc, "value") else rc)
    c.connect(host, port, keepalive=30)
    c.loop_start()
    try:
        rc = q.get(timeout=10)
    finally:
        c.disconnect() # its network thread ends by itself (loop_stop waits up to 1 s)
    return rc
T0 = time.time()
def mark(what): print("%.3f %s" % (time.time() - T0, what), file=sys.stderr, flush=True)
for i in range(rounds):
    mark("round %d" % i)
    offset = i % 3
    tid = "urn:theft:%d" % i
    result = "lmos/v1/things/%s/td/result" % tid
    errors = []
    # The honest agent.
    aq, asub = queue.Queue(), queue.Queue()
    a = mqtt.Client(client_id="victim-%d" % i, protocol=mqtt.MQTTv5)
    def a_connect(c, u, f, rc, p=None):
        if rc != 0: aq.put(("error", "agent CONNACK %s" % rc)); return
        c.subscribe(result, qos=0)
    a.on_connect = a_connect
    a.on_subscribe = lambda c, u, mid, rcs, p=None: asub.put([r.value for r in rcs])
    a.on_message = lambda c, u, m: aq.put(("result", m.payload.decode()))
    a.on_disconnect = lambda c, u, rc, p=None: aq.put(("disconnect", rc.value if hasattr(rc, "value") else rc))
    a.connect(host, port, keepalive=30, clean_start=True)
    a.loop_start()
    rcs = asub.get(timeout=10)
    if any(r >= 0x80 for r in rcs): errors.append("agent subscribe refused %s" % rcs)
    info = a.publish("lmos/v1/things/%s/td" % tid, td(i), qos=1)
    info.wait_for_publish(timeout=10)
    if offset: time.sleep(offset / 1000.0)
    # The attacker.
    v5 = i % 2 == 0
    xq, xconn = queue.Queue(), queue.Queue()
    x = mqtt.Client(client_id="victim-%d" % i, clean_session=None if v5 else False,
                    protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311)
    def x_connect(c, u, f, rc, p=None):
        sei = getattr(p, "SessionExpiryInterval", None) if p is not None else None
        xconn.put((rc.value if hasattr(rc, "value") else rc, f.get("session present", 0), sei))
        c.subscribe([(result, 0), ("lmos/v1/things/+/td/result", 0)])
    x.on_connect = x_connect
    x.on_message = lambda c, u, m: xq.put(m.payload.decode())
    x.on_disconnect = lambda c, u, rc, p=None: errors.append("attacker disconnected rc %s" % rc) if rc != 0 else None
    if v5:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        x.connect(host, port, keepalive=30, clean_start=False, properties=props)
    else:
        x.connect(host, port, keepalive=30)
    x.loop_start()
    mark("attacker connecting")
    xrc, present, sei = xconn.get(timeout=10)
    mark("attacker connected")
    if xrc != 0: errors.append("attacker CONNACK %s" % xrc)
    # The agent's outcome: its result, or kicked off by the takeover.
    agent, agent_login = "timeout", None
    try:
        kind, v = aq.get(timeout=10)
        if kind == "result":
            r = json.loads(v)
            if r.get("credentials"):
                agent = "credentials"
                agent_login = login(r["credentials"])
            else:
                agent = "result without credentials: " + v
        elif kind == "disconnect":
            # 0x8E Session taken over; under load paho may see only the
            # socket close (rc 0) the takeover causes.
            agent = "kicked"
        else:
            agent = v
    except queue.Empty:
        pass
    mark("agent " + agent)
    # Wait for the result of the attacker's own request on the same
    # Thing's worker, which ran the agent's join before it: a
    # deregistration, always refused to an anonymous client.
    x.publish("lmos/v1/things/%s/td" % tid, b"", qos=1).wait_for_publish(timeout=10)
    stolen, own, logins = 0, False, []
    deadline = time.time() + 10
    while not own and time.time() < deadline:
        try:
            r = json.loads(xq.get(timeout=max(0.01, deadline - time.time())))
        except queue.Empty:
            break
        if r.get("credentials"):
            stolen += 1
            logins.append(login(r["credentials"]))
        elif r.get("status") == "rejected":
            own = True
    mark("own result")
    x.disconnect()
    a.disconnect()
    # An agent kicked off before it got its credentials joins again, as it
    # would after any lost connection, and must be served: the hub undid
    # the join whose credentials reached nobody.
    rejoin, rejoin_login = None, None
    if agent == "kicked":
        rq, rsub = queue.Queue(), queue.Queue()
        a2 = mqtt.Client(client_id="victim-%d" % i, protocol=mqtt.MQTTv5)
        a2.on_connect = lambda c, u, f, rc, p=None: c.subscribe(result, qos=0)
        a2.on_subscribe = lambda c, u, mid, rcs, p=None: rsub.put(1)
        a2.on_message = lambda c, u, m: rq.put(m.payload.decode())
        a2.connect(host, port, keepalive=30, clean_start=True)
        a2.loop_start()
        rsub.get(timeout=10)
        a2.publish("lmos/v1/things/%s/td" % tid, td(i), qos=1)
        try:
            r = json.loads(rq.get(timeout=10))
            rejoin = r.get("status")
            if rejoin != "accepted":
                rejoin = json.dumps(r)
            if r.get("credentials"):
                rejoin_login = login(r["credentials"])
        except queue.Empty:
            rejoin = "timeout"
        a2.disconnect()
    print(json.dumps({"round": i, "offset": offset, "attackerV5": v5, "sessionPresent": present, "sei": sei,
        "ownResult": own, "stolen": stolen, "stolenLogins": logins, "agent": agent, "agentLogin": agent_login, "rejoin": rejoin, "rejoinLogin": rejoin_login,
        "errors": errors}), flush=True)
`

type theftRound struct {
	Round          int      `json:"round"`
	Offset         int      `json:"offset"`
	AttackerV5     bool     `json:"attackerV5"`
	SessionPresent int      `json:"sessionPresent"`
	SEI            *int     `json:"sei"`
	OwnResult      bool     `json:"ownResult"`
	Stolen         int      `json:"stolen"`
	StolenLogins   []int    `json:"stolenLogins"`
	Agent          string   `json:"agent"`
	AgentLogin     *int     `json:"agentLogin"`
	Rejoin         *string  `json:"rejoin"`
	RejoinLogin    *int     `json:"rejoinLogin"`
	Errors         []string `json:"errors"`
}

// TestAnonymousSessionTheft is issue 12's attack 4: an attacker that
// connects with a joining agent's client id and Clean Start 0 must never
// see the agent's join result (its credentials) nor log in as the Thing;
// it gets a fresh session (Session Present 0, Session Expiry Interval 0 in
// MQTT 5). The agent, when not kicked off by the takeover, gets its
// credentials and logs in with them. Both sides are Python paho 1.6.1.
func TestAnonymousSessionTheft(t *testing.T) {
	h := startHub(t, nil)
	const rounds = 20
	out, stderr := runPaho(t, h, 120*time.Second, pahoTheftScript, strconv.Itoa(rounds))
	var got []theftRound
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r theftRound
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("script line %q: %v", sc.Text(), err)
		}
		got = append(got, r)
	}
	defer func() {
		if t.Failed() {
			t.Logf("timeline:\n%s", stderr)
		}
	}()
	if len(got) != rounds {
		t.Fatalf("%d rounds reported, want %d\n%s", len(got), rounds, stderr)
	}
	stolen, kicked, served := 0, 0, 0
	for _, r := range got {
		for _, e := range r.Errors {
			t.Errorf("round %d: %s", r.Round, e)
		}
		stolen += r.Stolen
		for _, rc := range r.StolenLogins {
			if rc == 0 {
				t.Errorf("round %d: the attacker logged in with stolen credentials", r.Round)
			}
		}
		if r.SessionPresent != 0 {
			t.Errorf("round %d (offset %d ms, v5 %v): the attacker resumed the agent's session", r.Round, r.Offset, r.AttackerV5)
		}
		if r.AttackerV5 && (r.SEI == nil || *r.SEI != 0) {
			t.Errorf("round %d: the attacker's CONNACK Session Expiry Interval is %v, want 0", r.Round, r.SEI)
		}
		if !r.OwnResult {
			t.Errorf("round %d: the attacker's own join result never came", r.Round)
		}
		switch r.Agent {
		case "credentials":
			served++
			if r.AgentLogin == nil || *r.AgentLogin != 0 {
				t.Errorf("round %d: the agent cannot log in with its credentials: %v", r.Round, r.AgentLogin)
			}
		case "kicked":
			kicked++
			if r.Rejoin == nil || *r.Rejoin != "accepted" || r.RejoinLogin == nil || *r.RejoinLogin != 0 {
				t.Errorf("round %d: the kicked agent's new join: %v, login %v; want accepted with credentials that log in", r.Round, deref(r.Rejoin), r.RejoinLogin)
			}
		default:
			t.Errorf("round %d: the agent, not kicked off, got no credentials: %s", r.Round, r.Agent)
		}
	}
	t.Logf("%d rounds: %d results stolen, agent served %d, kicked off %d", rounds, stolen, served, kicked)
	if stolen != 0 {
		t.Errorf("the attacker read %d join results with credentials", stolen)
	}
	if n := h.Main.Broker.Refused("mqtt.joinTakenOver"); n != uint64(kicked) {
		t.Errorf("mqtt.joinTakenOver %d, want one per agent kicked off (%d)", n, kicked)
	}
	if n := h.Main.Broker.Refused("mqtt.anonymousSession"); n != rounds {
		t.Errorf("mqtt.anonymousSession refusals %d, want %d", n, rounds)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
