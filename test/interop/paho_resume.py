"""Resume a session the hub holds QoS 1/2 messages for (mqtt/resume_test.go).

Usage: paho_resume.py HOST PORT VERSION(5|311) CLIENTID USER PASS RECEIVEMAX(0: none) COUNT

Connects without a clean start (MQTT 5: Session Expiry 3600 and, unless 0,
the Receive Maximum given), prints "msg TOPIC PAYLOAD" per message as it
arrives, and disconnects once COUNT messages came and paho has completed
every one (no message left in its incoming state). Prints "error ..." and
exits 1 on a refused CONNECT, no session present, a resent message without
DUP, a disconnection it did not ask for, or a time-out.
"""
import sys, threading, time
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

host, port, version, cid, user, pw, rm, count = sys.argv[1:9]
port, rm, count = int(port), int(rm), int(count)
v5 = version == "5"
errors = []
lock = threading.Lock()
got = 0
connected = threading.Event()
done = threading.Event()
leaving = False

def err(m):
    print("error " + m, flush=True)
    errors.append(m)
    done.set()

def on_connect(c, u, flags, rc, p=None):
    if rc != 0:
        err("connack rc=%s" % rc)
    elif not flags.get("session present"):
        err("no session present")
    connected.set()

def on_disconnect(c, u, rc, p=None):
    if not leaving:
        err("disconnected rc=%s" % rc)
    done.set()

def on_message(c, u, m):
    global got
    if not m.dup:
        err("message %d resent without DUP" % m.mid)
    print("msg %s %s" % (m.topic, m.payload.decode()), flush=True)
    with lock:
        got += 1

if v5:
    c = mqtt.Client(client_id=cid, protocol=mqtt.MQTTv5)
else:
    c = mqtt.Client(client_id=cid, protocol=mqtt.MQTTv311, clean_session=False)
c.username_pw_set(user, pw)
c.on_connect, c.on_disconnect, c.on_message = on_connect, on_disconnect, on_message
if v5:
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    if rm > 0:
        props.ReceiveMaximum = rm
    c.connect(host, port, 30, clean_start=False, properties=props)
else:
    c.connect(host, port, 30)
c.loop_start()
deadline = time.time() + 20
while time.time() < deadline and not errors:
    with lock:
        n = got
    # QoS 2 messages wait in _in_messages until their PUBREL.
    if n >= count and not c._in_messages:
        break
    time.sleep(0.02)
else:
    if not errors:
        err("timed out with %d of %d messages" % (got, count))
leaving = True
c.disconnect()
c.loop_stop()
sys.exit(1 if errors else 0)
