"""paho_parked.py - Python paho-mqtt 1.6 as a client the hub parks while idle.

    /usr/bin/python3 paho_parked.py sub HOST PORT VERSION CLIENT_ID FILTERS COUNT
    /usr/bin/python3 paho_parked.py pub HOST PORT VERSION CLIENT_ID USER PASSWORD

VERSION is 5 or 311. sub connects anonymously, subscribes to FILTERS
(comma-separated) at QoS 2, prints "ready" once subscribed, then
"msg <topic> q<qos> r<retain> <payload>" for each message, and exits 0
after COUNT of them. pub connects with the Thing's credentials, prints
"ready", then for each line "TOPIC QOS RETAIN PAYLOAD" on stdin publishes
and, once paho has it acknowledged (QoS 1/2) or written (QoS 0), prints
"published <payload>"; it exits 0 at the end of stdin. Both print every
error paho logs as "error …" and an unexpected disconnection as
"disconnected <rc>" (the caller fails on either), and exit 2 when they
waited 20 s for anything.
"""
import sys
import threading

import paho.mqtt.client as mqtt

role, host, port, version, client_id = sys.argv[1:6]
port = int(port)
proto = mqtt.MQTTv5 if version == "5" else mqtt.MQTTv311
c = mqtt.Client(client_id=client_id, protocol=proto)
ready = threading.Event()
done = threading.Event()
expected_disconnect = False
got = 0


def on_connect(client, userdata, flags, rc, properties=None):
    if rc != 0:
        print("refused %s" % rc, flush=True)
        done.set()
        return
    if role == "sub":
        client.subscribe([(f, 2) for f in sys.argv[6].split(",")])
    else:
        print("ready", flush=True)
        ready.set()


def on_subscribe(client, userdata, mid, granted, properties=None):
    for code in granted:
        code = code.value if hasattr(code, "value") else code
        if code >= 0x80:
            print("error suback %d" % code, flush=True)
    print("ready", flush=True)
    ready.set()


def on_message(client, userdata, msg):
    global got
    got += 1
    print("msg %s q%d r%d %s" % (msg.topic, msg.qos, int(msg.retain), msg.payload.decode()), flush=True)
    if got >= int(sys.argv[7]):
        done.set()


def on_disconnect(client, userdata, rc, properties=None):
    if not expected_disconnect:
        print("disconnected %s" % rc, flush=True)
        done.set()
        ready.set()


def on_log(client, userdata, level, buf):
    if level == mqtt.MQTT_LOG_ERR:
        print("error %s" % buf, flush=True)


c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
c.on_disconnect, c.on_log = on_disconnect, on_log
if role == "pub":
    c.username_pw_set(sys.argv[6], sys.argv[7])
c.connect(host, port, keepalive=60)
c.loop_start()
ok = ready.wait(20)
if ok and role == "sub":
    ok = done.wait(20)
elif ok:
    for line in sys.stdin:
        topic, qos, retain, payload = line.split()
        info = c.publish(topic, payload, qos=int(qos), retain=retain == "1")
        info.wait_for_publish(20)
        if not info.is_published():
            print("error not published %s" % payload, flush=True)
            ok = False
            break
        print("published %s" % payload, flush=True)
expected_disconnect = True
c.disconnect()
c.loop_stop()
sys.exit(0 if ok and not (role == "pub" and done.is_set()) else 2)
