"""paho_groups.py - Python paho-mqtt 1.6 on an lmos-hub group channel.

    /usr/bin/python3 paho_groups.py HOST PORT VERSION USER PASSWORD CLIENT_ID FILTER COUNT

VERSION is 5 or 311. Connects with the Thing's credentials, subscribes to
FILTER (several: comma-separated) at QoS 1 and prints "suback <code>" (the
first filter's reason code: 0/1 granted, 128 refused in 3.1.1, 135 Not
authorized in 5). With COUNT > 0 it then prints "ready", reads COUNT
messages, printing "msg <topic> <payload>" for each, and disconnects; with
COUNT -1 it reads until a message whose payload is "end". Every error paho logs is printed as "error …", and
an unexpected disconnection as "disconnected <rc>": the caller fails on
either. It exits 0 once done, 2 when it waited 20 s for anything.
"""
import sys
import threading

import paho.mqtt.client as mqtt

host, port, version, user, password, client_id, filt, count = sys.argv[1:9]
port, count = int(port), int(count)
proto = mqtt.MQTTv5 if version == "5" else mqtt.MQTTv311
c = mqtt.Client(client_id=client_id, protocol=proto)
c.username_pw_set(user, password)
done = threading.Event()
got = 0
expected_disconnect = False


def on_connect(client, userdata, flags, rc, properties=None):
    if rc != 0:
        print("refused %s" % rc, flush=True)
        done.set()
        return
    client.subscribe([(f, 1) for f in filt.split(",")])


def on_subscribe(client, userdata, mid, granted, properties=None):
    code = granted[0]
    code = code.value if hasattr(code, "value") else code
    print("suback %d" % code, flush=True)
    if count == 0:
        done.set()
    else:
        print("ready", flush=True)


def on_message(client, userdata, msg):
    global got
    got += 1
    payload = msg.payload.decode()
    print("msg %s %s" % (msg.topic, payload), flush=True)
    if (count > 0 and got >= count) or (count < 0 and payload == "end"):
        done.set()


def on_disconnect(client, userdata, rc, properties=None):
    if not expected_disconnect:
        print("disconnected %s" % rc, flush=True)
        done.set()


def on_log(client, userdata, level, buf):
    if level == mqtt.MQTT_LOG_ERR:
        print("error %s" % buf, flush=True)


c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
c.on_disconnect, c.on_log = on_disconnect, on_log
c.connect(host, port, keepalive=30)
c.loop_start()
ok = done.wait(20)
expected_disconnect = True
c.disconnect()
c.loop_stop()
sys.exit(0 if ok else 2)
