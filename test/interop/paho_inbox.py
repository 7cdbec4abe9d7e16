"""paho_inbox.py: whose is an anonymous client's reply inbox (issue 24 point 8).

    /usr/bin/python3 paho_inbox.py HOST PORT CLIENT_ID

Eclipse paho-mqtt 1.6.1 (Debian bookworm) clients, each bound to a local
address of its own (127.0.0.1, 127.0.0.2, … all reach the hub on
loopback), driven by JSON-lines commands on stdin; reports on stdout, an
{"ok": cmd} when a command is done:

  {"cmd": "victim", "bind": A}     an anonymous MQTT 5 consumer with CLIENT_ID
                                   from A, subscribed to its inbox
                                   lmos/v1/clients/CLIENT_ID/#
  {"cmd": "invoke", "topic": T, "corr": C}
                                   the consumer publishes {} to T at QoS 1,
                                   Response Topic in its inbox, Correlation
                                   Data C
  {"cmd": "attack", "bind": A, "v": 5|4, "username"?, "password"?}
                                   another client connects with CLIENT_ID from
                                   A (clean start); reports {"attack": reason
                                   code, "v"}; once in, it subscribes to the
                                   inbox and reports {"stolen": C} for each
                                   message it reads there
  {"cmd": "takeover", "bind": A}   a new connection of the consumer (CLIENT_ID,
                                   from A) while the old one is still
                                   connected, as after a connection that died
                                   unnoticed; the old one's end is reported as
                                   {"old_disconnected": reason code}; the new
                                   one subscribes to the inbox and is the
                                   consumer from then on
  {"cmd": "assigned"}              two MQTT 5 clients with an empty client id:
                                   reports {"assigned": [id, id]}
  {"cmd": "state"}                 reports {"replies": [C…], "victim_up": bool}
  {"cmd": "exit"}

Every message the consumer reads in its inbox is also reported at once:
{"reply": C, "status": lmos-status}. A DISCONNECT or a lost connection of
the consumer is reported as {"victim_disconnected": reason code}.
"""
import json
import os
import sys
import threading

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

host, port, cid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
inbox = f"lmos/v1/clients/{cid}/"
out_lock = threading.Lock()


def say(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def fail(what, err):
    say({"error": f"{what}: {err}"})
    os._exit(1)


def code(rc):
    return rc.value if hasattr(rc, "value") else rc


def user_prop(msg, key):
    for k, v in getattr(msg.properties, "UserProperty", None) or []:
        if k == key:
            return v
    return None


def connect(client_id, bind, v5=True, username=None, password=None, on_message=None, on_disconnect=None):
    """Connects and returns (client, CONNACK reason code); on a refusal the
    client is stopped."""
    done = threading.Event()
    got = {}
    c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
                    **({} if v5 else {"clean_session": True}))
    if username:
        c.username_pw_set(username, password)

    def on_connect(cl, u, flags, rc, props=None):
        got["rc"] = code(rc)
        got["props"] = props
        done.set()

    c.on_connect = on_connect
    if on_message:
        c.on_message = on_message
    if on_disconnect:
        c.on_disconnect = on_disconnect
    kw = {"clean_start": True} if v5 else {}
    c.connect(host, port, keepalive=30, bind_address=bind, **kw)
    c.loop_start()
    if not done.wait(10):
        fail(client_id, "no CONNACK within 10 s")
    if got["rc"] != 0:
        c.loop_stop()
    return c, got["rc"], got["props"]


def subscribe(c, topic):
    ev = threading.Event()
    granted = {}

    def on_subscribe(cl, u, mid, g, props=None):
        granted["g"] = [code(x) for x in g]
        ev.set()

    c.on_subscribe = on_subscribe
    rc, _ = c.subscribe(topic, qos=1)
    if rc != mqtt.MQTT_ERR_SUCCESS or not ev.wait(10):
        fail("subscribe", f"{topic}: rc {rc}")
    if any(x >= 0x80 for x in granted["g"]):
        fail("subscribe", f"{topic} refused: {granted['g']}")


victim = None
victim_up = threading.Event()
replies = []
attackers = []


def victim_message(c, u, m):
    corr = (getattr(m.properties, "CorrelationData", b"") or b"").decode()
    replies.append(corr)
    say({"reply": corr, "status": user_prop(m, "lmos-status")})


def victim_gone(c, u, rc, props=None):
    victim_up.clear()
    say({"victim_disconnected": code(rc)})


say({"ready": True})
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["cmd"]
    if op == "victim":
        if victim is not None:
            victim.on_disconnect = None
            victim.disconnect()
            victim.loop_stop()
        victim, rc, _ = connect(cid, cmd["bind"], on_message=victim_message, on_disconnect=victim_gone)
        if rc != 0:
            fail("victim", f"CONNACK {rc}")
        victim_up.set()
        subscribe(victim, inbox + "#")
    elif op == "takeover":
        old = victim
        old.on_disconnect = lambda c, u, rc, props=None: (say({"old_disconnected": code(rc)}), c.loop_stop())
        old.on_message = lambda c, u, m: say({"error": "the old connection got a message after the takeover"})
        victim, rc, _ = connect(cid, cmd["bind"], on_message=victim_message, on_disconnect=victim_gone)
        if rc != 0:
            fail("takeover", f"CONNACK {rc}")
        victim_up.set()
        subscribe(victim, inbox + "#")
    elif op == "invoke":
        p = Properties(PacketTypes.PUBLISH)
        p.ResponseTopic = inbox + "r"
        p.CorrelationData = cmd["corr"].encode()
        p.ContentType = "application/json"
        info = victim.publish(cmd["topic"], "{}", qos=1, properties=p)
        info.wait_for_publish(10)
        if not info.is_published():
            fail("invoke", "no PUBACK")
    elif op == "attack":
        v5 = cmd["v"] == 5

        def stolen(c, u, m):
            corr = (getattr(m.properties, "CorrelationData", b"") or b"").decode() if v5 else m.payload.decode()
            say({"stolen": corr, "topic": m.topic})

        c, rc, _ = connect(cid, cmd["bind"], v5, cmd.get("username"), cmd.get("password"), on_message=stolen)
        say({"attack": rc, "v": cmd["v"]})
        if rc == 0:
            attackers.append(c)
            subscribe(c, inbox + "#")
    elif op == "assigned":
        ids = []
        for _ in range(2):
            c, rc, props = connect("", "127.0.0.1")
            if rc != 0:
                fail("assigned", f"CONNACK {rc}")
            ids.append(getattr(props, "AssignedClientIdentifier", None))
            c.disconnect()
            c.loop_stop()
        say({"assigned": ids})
    elif op == "state":
        say({"replies": list(replies), "victim_up": victim_up.is_set()})
    elif op == "exit":
        say({"ok": op})
        os._exit(0)
    else:
        fail("command", op)
    say({"ok": op})
