"""Reconnects and takeovers that reuse one client id (mqtt/sameclientid_test.go).

Usage: paho_reuse_id.py HOST PORT ROUNDS NSUBS

For MQTT 5 and 3.1.1, each a clean session, ROUNDS times: a client "same"
subscribes NSUBS filters and its inbox, then either disconnects (reconnect)
or stays (takeover: the hub must end it), and a new connection "same"
subscribes its inbox; one QoS 1 message published to the inbox must reach
the new connection. Prints the losses per case; exits 1 on any loss or
protocol error (a refused CONNECT or SUBSCRIBE, an unexpected disconnect).
"""
import sys, threading, time
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

host, port, rounds, nsubs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
errors = []
def err(m):
    errors.append(m)

class C:
    def __init__(self, cid, v5, expect_cut=False):
        self.v5 = v5
        self.c = mqtt.Client(client_id=cid, protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311, **({} if v5 else {"clean_session": True}))
        self.connected = threading.Event(); self.subbed = threading.Event(); self.gone = threading.Event()
        self.got = threading.Event(); self.rc = None; self.drc = None; self.expect_cut = expect_cut; self.leaving = False
        self.c.on_connect = self.on_connect; self.c.on_subscribe = self.on_subscribe
        self.c.on_disconnect = self.on_disconnect; self.c.on_message = self.on_message
    def on_connect(self, c, u, f, rc, p=None):
        self.rc = rc; self.connected.set()
    def on_subscribe(self, c, u, mid, granted, p=None):
        for g in granted:
            v = g.value if hasattr(g, "value") else g
            if v >= 0x80: err("suback refused %r" % (v,))
        self.subbed.set()
    def on_disconnect(self, c, u, rc, p=None):
        self.drc = rc
        if self.expect_cut: c.disconnect()  # no automatic reconnect with this id
        self.gone.set()
        if not self.leaving and not self.expect_cut: err("%s unexpected disconnect rc=%s" % (c._client_id, rc))
    def on_message(self, c, u, m):
        self.got.set()
    def start(self):
        if self.v5: self.c.connect(host, port, 30, clean_start=True)
        else: self.c.connect(host, port, 30)
        self.c.loop_start()
        if not self.connected.wait(5): err("no connack"); return False
        if self.rc != 0: err("connack rc=%s" % self.rc); return False
        return True
    def sub(self, filters):
        self.subbed.clear()
        self.c.subscribe([(f, 1) for f in filters])
        if not self.subbed.wait(5): err("no suback")
    def stop(self):
        self.leaving = True
        self.c.disconnect()
        if not self.gone.wait(5): err("no disconnect")

inbox = "lmos/v1/clients/same/r"
many = ["lmos/v1/things/x%d/events/+" % j for j in range(nsubs)]
pub = C("pub", True); pub.start()
fail = False
for v5 in (True, False):
    for mode in ("reconnect", "takeover"):
        lost = 0
        for i in range(rounds):
            a = C("same", v5, expect_cut=(mode == "takeover"))
            if not a.start(): break
            a.sub(many + [inbox])
            if mode == "reconnect": a.stop()
            b = C("same", v5)
            if not b.start(): break
            b.sub([inbox])
            r = pub.c.publish(inbox, "round %d" % i, qos=1); r.wait_for_publish(5)
            if not b.got.wait(2): lost += 1
            if mode == "takeover":
                if not a.gone.wait(2): err("taken-over connection not ended")
                elif v5 and a.drc != 142: err("taken over with reason %s, not 0x8E" % (a.drc,))
            b.stop()
        print("v%s %s lost %d of %d" % (5 if v5 else 4, mode, lost, rounds), flush=True)
        if lost: fail = True
pub.stop()
for e in errors: print("error:", e, flush=True)
sys.exit(1 if fail or errors else 0)
