"""paho_v311.py - Python paho-mqtt 1.6 as an MQTT 3.1.1 client of lmos-hub.

    /usr/bin/python3 paho_v311.py HOST PORT CLIENT_ID

Connects (MQTT 3.1.1), prints "connected", and waits for the broker to end
the connection; prints "disconnected <rc>" and every error paho logs. A
server that closes the connection gives rc 7 (connection lost); a packet
3.1.1 does not allow a server to send, such as DISCONNECT, gives rc 2
(protocol error) and an "Unrecognised command" error.
"""
import sys

import paho.mqtt.client as mqtt

host, port, client_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv311, clean_session=True)


def on_connect(client, userdata, flags, rc):
    print("connected" if rc == 0 else "refused %d" % rc, flush=True)


def on_disconnect(client, userdata, rc):
    print("disconnected %d" % rc, flush=True)
    client.disconnect()  # ends loop_forever instead of reconnecting


def on_log(client, userdata, level, buf):
    if level == mqtt.MQTT_LOG_ERR:
        print("error %s" % buf, flush=True)


c.on_connect, c.on_disconnect, c.on_log = on_connect, on_disconnect, on_log
c.connect(host, port, keepalive=30)
c.loop_forever(retry_first_connection=False)
