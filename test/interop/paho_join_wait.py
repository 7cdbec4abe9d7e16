"""paho_join_wait.py: an Eclipse paho-mqtt (Python, 1.6.1) agent that joins a
hub in join mode approve and waits for the decision on its connection.

    /usr/bin/python3 paho_join_wait.py MQTT_URL THING_ID

Connects anonymously (MQTT 5), subscribes to its td/result, publishes its TD
and reports every result as {"result": {...}} (JSON lines, as mqttjs.mjs).
Commands on stdin: {"cmd": "reconnect"} connects again with the credentials
of the last accepted result and publishes "online" to its status topic at
QoS 1 (a refused connect fails); {"cmd": "exit"}. A disconnect it did not
ask for, a refused SUBSCRIBE or a publish without PUBACK is an {"error"}
line and exit 1.
"""
import json
import os
import sys
import urllib.parse

import paho_client as pc


def main():
    url, tid = sys.argv[1], sys.argv[2]
    creds = {}

    def on_result(msg):
        try:
            res = json.loads(msg.payload)
        except ValueError as e:
            pc.fail("td/result", e)
        if res.get("status") == "accepted" and res.get("credentials"):
            creds.update(res["credentials"])
        pc.say({"result": res})

    client_id = f"py-join-{os.getpid()}"
    s = pc.Session(url, 5, client_id, on_result)
    s.subscribe(pc.thing_topic(tid, "td/result"))
    td = {"@context": "https://www.w3.org/2022/wot/td/v1.1", "id": tid, "title": "paho waiting agent",
          "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}}, "security": "nosec_sc",
          "events": {"e": {"data": {"type": "string"},
                           "forms": [{"href": pc.thing_topic(tid, "events/e"), "op": "subscribeevent"}]}}}
    # ready first: a result may come before the PUBACK is handled.
    pc.say({"ready": tid, "clientId": client_id})
    s.publish(pc.thing_topic(tid, "td"), json.dumps(td), props=pc.props(ContentType="application/td+json"))
    member = None
    for line in sys.stdin:
        c = json.loads(line)
        if c["cmd"] == "reconnect":
            if not creds:
                pc.fail("reconnect", "no credentials received")
            member = pc.Session(url, 5, client_id + "-member", lambda m: None,
                                username=creds["username"], password=creds["password"])
            member.publish(pc.thing_topic(tid, "status"), "online", retain=True)
        elif c["cmd"] == "exit":
            s.end()
            if member:
                member.end()
        else:
            pc.fail("command", c)
        pc.say({"ok": c["cmd"]})
        if c["cmd"] == "exit":
            return


if __name__ == "__main__":
    main()
