"""paho_client.py: Eclipse paho-mqtt (Python) as an lmos-hub agent or consumer.

    /usr/bin/python3 paho_client.py agent MQTT_URL THING_ID VERSION(5|4)
    /usr/bin/python3 paho_client.py consumer MQTT_URL VERSION(5|4)

Speaks the JSON-lines protocol of mqttjs.mjs (commands on stdin, reports on
stdout) and serves or invokes the same "count" action as mqttjs-agent.mjs,
at QoS 1. Written for paho-mqtt 1.6.1 (Debian bookworm; its callbacks), MQTT
5 (protocol=MQTTv5) and 3.1.1. Any connect or subscribe refusal, any
disconnect the script did not ask for (rc != 0), a failed publish or an
unexpected result is an {"error"} line and exit 1.
"""
import json
import os
import queue
import sys
import threading
import urllib.parse

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

out_lock = threading.Lock()


def say(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def fail(what, err):
    say({"error": f"{what}: {err}"})
    os._exit(1)


def topic_key(tid):
    return "".join("%%%02X" % ord(c) if c in "%/+#" else c for c in tid)


def thing_topic(tid, rest):
    return f"lmos/v1/things/{topic_key(tid)}/{rest}"


class Session:
    """One strict MQTT session: connected on return, fatal on any error."""

    def __init__(self, url, version, client_id, on_message, username=None, password=None, will=None):
        u = urllib.parse.urlparse(url)
        self.v5 = version == 5
        self.ending = False
        self.up = threading.Event()
        self.acks = {}
        self.c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5 if self.v5 else mqtt.MQTTv311)
        if username:
            self.c.username_pw_set(username, password)
        if will:
            self.c.will_set(will, "offline", qos=1, retain=True)
        self.c.on_connect = self._connected
        self.c.on_disconnect = self._disconnected
        self.c.on_subscribe = self._subscribed
        self.c.on_message = lambda c, u, msg: on_message(msg)
        kw = {"clean_start": True} if self.v5 else {}
        self.c.connect(u.hostname, u.port, keepalive=30, **kw)
        self.c.loop_start()
        if not self.up.wait(5):
            fail(client_id, "no CONNACK within 5 s")

    def _connected(self, c, userdata, flags, rc, properties=None):
        if rc != 0:
            fail("connect", f"refused: {rc}")
        self.up.set()

    def _disconnected(self, c, userdata, rc, properties=None):
        if rc != 0 or not self.ending:
            fail("disconnect", f"unexpected, rc {rc}")

    def _subscribed(self, c, userdata, mid, granted, properties=None):
        self.acks[mid] = granted
        ev = self.acks.pop(("ev", mid), None)
        if ev:
            ev.set()

    def subscribe(self, topic):
        ev = threading.Event()
        rc, mid = self.c.subscribe(topic, qos=1)
        if rc != mqtt.MQTT_ERR_SUCCESS:
            fail("subscribe", rc)
        self.acks[("ev", mid)] = ev
        if mid in self.acks:  # the SUBACK won the race
            ev.set()
        if not ev.wait(5):
            fail("subscribe", f"no SUBACK for {topic}")
        for g in self.acks.pop(mid):
            code = g.value if hasattr(g, "value") else g
            if code >= 0x80:
                fail("subscribe", f"{topic} refused: {code}")

    def publish(self, topic, payload, retain=False, props=None, wait=True):
        info = self.c.publish(topic, payload, qos=1, retain=retain, properties=props)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            fail("publish", f"{topic}: rc {info.rc}")
        if wait:
            info.wait_for_publish(5)
            if not info.is_published():
                fail("publish", f"{topic}: no PUBACK within 5 s")

    def end(self):
        self.ending = True
        self.c.disconnect()
        self.c.loop_stop()


def props(**kv):
    p = Properties(PacketTypes.PUBLISH)
    for k, v in kv.items():
        setattr(p, k, v)
    return p


def user_prop(msg, key):
    for k, v in getattr(msg.properties, "UserProperty", None) or []:
        if k == key:
            return v
    return None


def join(url, version, td, client_id):
    result = queue.Queue()
    s = Session(url, version, client_id + "-join", lambda m: result.put(m.payload))
    s.subscribe(thing_topic(td["id"], "td/result"))
    p = props(ContentType="application/td+json") if s.v5 else None
    s.publish(thing_topic(td["id"], "td"), json.dumps(td), retain=True, props=p)
    try:
        res = json.loads(result.get(timeout=5))
    except queue.Empty:
        fail("join", "no td/result")
    s.end()
    if res.get("status") != "accepted" or not res.get("credentials"):
        fail("join", f"refused: {res}")
    return res["credentials"]


def agent(url, tid, version):
    hostport = urllib.parse.urlparse(url).netloc

    def form(rest, key, op):
        topic = thing_topic(tid, rest)
        return {"href": f"mqtt://{hostport}/{topic}", key: topic, "op": op, "contentType": "application/json"}

    td = {
        "@context": ["https://www.w3.org/2022/wot/td/v1.1"],
        "@type": "lmos:Agent",
        "id": tid,
        "title": f"paho-mqtt agent (MQTT {version})",
        "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
        "security": "nosec_sc",
        "properties": {"level": {"type": "number", "observable": True, "forms": [
            form("properties/level", "mqv:filter", ["readproperty", "observeproperty"]),
            form("properties/level/set", "mqv:topic", "writeproperty")]}},
        "actions": {"count": {"input": {"type": "object"}, "output": {"type": "object"},
                              "forms": [form("actions/count", "mqv:topic", "invokeaction")]}},
        "events": {e: {"data": {"type": "object"}, "forms": [form("events/" + e, "mqv:filter", "subscribeevent")]}
                   for e in ("tick", "done")},
    }
    client_id = f"py-agent-{os.getpid()}"
    creds = join(url, version, td, client_id)
    work = queue.Queue()
    s = Session(url, version, client_id, work.put, creds["username"], creds["password"], thing_topic(tid, "status"))
    json_ct = {"ContentType": "application/json"} if s.v5 else {}

    def serve():
        # Replies are published from here, not from paho's network thread,
        # which must stay free to read their PUBACKs.
        while True:
            msg = work.get()
            try:
                data = json.loads(msg.payload) if msg.payload else None
            except ValueError as e:
                fail("request", e)
            if msg.topic == thing_topic(tid, "properties/level/set"):
                s.publish(thing_topic(tid, "properties/level"), json.dumps(data), retain=True, props=props(**json_ct) if s.v5 else None)
                say({"wrote": data})
                continue
            data = data or {}
            rt = getattr(msg.properties, "ResponseTopic", None) if s.v5 else None
            if not rt:
                s.publish(thing_topic(tid, "events/done"), json.dumps({"tag": data.get("tag")}), props=props(**json_ct) if s.v5 else None)
                continue
            corr = getattr(msg.properties, "CorrelationData", None)

            def reply(status, out):
                ups = [("lmos-status", status)]
                tp = user_prop(msg, "traceparent")
                if tp:
                    ups.append(("traceparent", tp))
                kw = {"UserProperty": ups, "ContentType": "application/json"}
                if corr is not None:
                    kw["CorrelationData"] = corr
                s.publish(rt, json.dumps(out), props=props(**kw), wait=False)

            for i in range(data.get("n", 0)):
                reply("running", {"tag": data.get("tag"), "i": i})
            reply("completed", {"tag": data.get("tag"), "n": data.get("n", 0), "agent": tid})

    threading.Thread(target=serve, daemon=True).start()
    s.subscribe(thing_topic(tid, "actions/+"))
    s.subscribe(thing_topic(tid, "properties/+/set"))
    s.publish(thing_topic(tid, "status"), "online", retain=True)
    s.publish(thing_topic(tid, "properties/level"), "0", retain=True, props=props(**json_ct) if s.v5 else None)
    say({"ready": tid, "clientId": client_id})
    for line in sys.stdin:
        c = json.loads(line)
        if c["cmd"] == "emit":
            for i in range(c["from"], c["from"] + c["n"]):
                s.publish(thing_topic(tid, "events/tick"), json.dumps({"seq": i}), props=props(**json_ct) if s.v5 else None)
        elif c["cmd"] == "exit":
            s.publish(thing_topic(tid, "status"), "offline", retain=True)
            s.end()
        else:
            fail("command", c)
        say({"ok": c["cmd"]})
        if c["cmd"] == "exit":
            return


def consumer(url, version):
    client_id = f"py-consumer-{os.getpid()}"
    inbox = f"lmos/v1/clients/{client_id}/r"
    pending = {}
    subs = set()
    lock = threading.Lock()

    def on_message(msg):
        try:
            data = json.loads(msg.payload) if msg.payload else None
        except ValueError as e:
            fail(msg.topic, e)
        if msg.topic in subs:
            return say({"msg": msg.topic, "data": data})
        if msg.topic != inbox:
            fail("message", f"on unexpected topic {msg.topic}")
        corr = (getattr(msg.properties, "CorrelationData", None) or b"").decode()
        with lock:
            req = pending.get(corr)
        if req is None:
            fail("result", f"unknown correlation data {corr!r}")
        status = user_prop(msg, "lmos-status")
        if (data or {}).get("tag") != req["tag"]:
            fail("result", f"for {req['tag']} carries {data}")
        if status == "running":
            req["running"].append(data["i"])
        elif status == "completed":
            with lock:
                del pending[corr]
            tp = user_prop(msg, "traceparent")
            if tp is not None and tp != req["traceparent"]:
                fail("result", f"traceparent {tp} for {req['traceparent']}")
            say({"result": req["tag"], "running": req["running"], "completed": data, "traced": tp is not None})
            req["done"].set()
        else:
            fail("result", f"lmos-status {status!r} for {req['tag']}")

    s = Session(url, version, client_id, on_message)
    if s.v5:
        s.subscribe(inbox)
    say({"ready": client_id})
    for line in sys.stdin:
        c = json.loads(line)
        if c["cmd"] == "batch":  # one at a time: a short sequence
            for tag in c["tags"]:
                tp = "00-" + tag.encode().hex().ljust(32, "0")[:32] + "-00f067aa0ba902b7-01"
                req = {"tag": tag, "running": [], "traceparent": tp, "done": threading.Event()}
                with lock:
                    pending[tag] = req
                p = props(ResponseTopic=inbox, CorrelationData=tag.encode(), ContentType="application/json", UserProperty=[("traceparent", tp)])
                s.publish(thing_topic(c["thing"], "actions/" + c["action"]), json.dumps({"n": c["n"], "tag": tag}), props=p)
                if not req["done"].wait(10):
                    fail("batch", f"no final result for {tag}")
        elif c["cmd"] == "fire":
            for tag in c["tags"]:
                s.publish(thing_topic(c["thing"], "actions/" + c["action"]), json.dumps({"n": c["n"], "tag": tag}))
        elif c["cmd"] == "sub":
            subs.add(c["topic"])
            s.subscribe(c["topic"])
        elif c["cmd"] == "exit":
            s.end()
        else:
            fail("command", c)
        say({"ok": c["cmd"]})
        if c["cmd"] == "exit":
            return


if __name__ == "__main__":
    try:
        if sys.argv[1] == "agent":
            agent(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        else:
            consumer(sys.argv[2], int(sys.argv[3]))
    except Exception as e:  # anything unexpected is a failure, reported
        fail("paho_client", repr(e))
