// mqttjs-agent.mjs — an mqtt.js 5 agent of lmos-hub (PROTOCOL §4).
//
//   node mqttjs-agent.mjs MQTT_URL THING_ID VERSION(5|4) QOS(0|1)
//
// Joins anonymously, reconnects with the issued credentials and serves:
//   action  count {n, tag}: n "running" results {tag, i}, then "completed"
//           {tag, n, agent}, each to the Response Topic with the request's
//           Correlation Data, user properties lmos-status and the request's
//           traceparent (MQTT 5). Without a Response Topic (MQTT 3.1.1
//           consumers, or this agent on 3.1.1) it publishes event done {tag}.
//   property level (number): a write on …/properties/level/set is published
//           retained on …/properties/level and reported {"wrote": value}.
//   events  tick {seq}, done {tag}.
// Commands on stdin: {"cmd":"emit","from":a,"n":k} (ticks a…a+k-1, each
// acknowledged before the next), {"cmd":"drop"} (kills its connection and
// reconnects), {"cmd":"exit"}. Reports {"ok": cmd} after each; any mqtt.js
// error, server DISCONNECT, unasked close or undecodable payload is an
// {"error"} line and exit 1.
import { commands, connect, fail, join, parse, say, subscribe, thingTopic, userProp } from "./mqttjs.mjs";

const [url, id, v, q] = process.argv.slice(2);
if (!url || !id) {
  console.error("usage: node mqttjs-agent.mjs MQTT_URL THING_ID VERSION QOS");
  process.exit(2);
}
const version = Number(v ?? 5);
const qos = Number(q ?? 1);
const hostport = new URL(url).host;
const form = (rest, key, op) => ({
  href: `mqtt://${hostport}/${thingTopic(id, rest)}`,
  [key]: thingTopic(id, rest),
  op,
  contentType: "application/json",
});
const td = {
  "@context": ["https://www.w3.org/2022/wot/td/v1.1", { lmos: "https://eclipse.dev/lmos/protocol/v1" }],
  "@type": "lmos:Agent",
  id,
  title: `mqtt.js agent (MQTT ${version === 5 ? "5" : "3.1.1"}, QoS ${qos})`,
  securityDefinitions: { nosec_sc: { scheme: "nosec" } },
  security: "nosec_sc",
  properties: {
    level: {
      type: "number",
      observable: true,
      forms: [
        form("properties/level", "mqv:filter", ["readproperty", "observeproperty", "unobserveproperty"]),
        form("properties/level/set", "mqv:topic", "writeproperty"),
      ],
    },
  },
  actions: {
    count: {
      input: { type: "object", properties: { n: { type: "integer" }, tag: { type: "string" } } },
      output: { type: "object" },
      forms: [form("actions/count", "mqv:topic", "invokeaction")],
    },
  },
  events: {
    tick: { data: { type: "object" }, forms: [form("events/tick", "mqv:filter", ["subscribeevent", "unsubscribeevent"])] },
    done: { data: { type: "object" }, forms: [form("events/done", "mqv:filter", ["subscribeevent", "unsubscribeevent"])] },
  },
};
const json = version === 5 ? { properties: { contentType: "application/json" } } : {};
const clientId = `js-agent-${process.pid}-${Math.random().toString(16).slice(2, 8)}`;
let level = 0;
let client;
let ending = false;
let creds;

async function online() {
  client = await connect(
    url,
    {
      protocolVersion: version,
      // Every session reuses the client id, as agents do on reconnect.
      clientId,
      username: creds.username,
      password: creds.password,
      will: { topic: thingTopic(id, "status"), payload: "offline", qos: 1, retain: true },
    },
    "agent",
    () => ending,
  );
  client.on("message", (topic, payload, packet) => {
    serve(topic, payload, packet).catch((e) => fail(`serve ${topic}`, e));
  });
  await subscribe(client, [thingTopic(id, "actions/+"), thingTopic(id, "properties/+/set")], qos);
  await client.publishAsync(thingTopic(id, "status"), "online", { qos: 1, retain: true });
  await client.publishAsync(thingTopic(id, "properties/level"), JSON.stringify(level), { qos, retain: true, ...json });
}

async function serve(topic, payload, packet) {
  if (topic === thingTopic(id, "properties/level/set")) {
    level = parse("write", payload);
    await client.publishAsync(thingTopic(id, "properties/level"), JSON.stringify(level), { qos, retain: true, ...json });
    say({ wrote: level });
    return;
  }
  if (topic !== thingTopic(id, "actions/count")) fail("request", `unexpected topic ${topic}`);
  const input = parse("invoke", payload) ?? {};
  const p = packet.properties ?? {};
  if (!p.responseTopic) {
    await client.publishAsync(thingTopic(id, "events/done"), JSON.stringify({ tag: input.tag }), { qos, ...json });
    return;
  }
  const reply = (status, out) => {
    const userProperties = { "lmos-status": status };
    const tp = userProp(packet, "traceparent");
    if (tp) userProperties.traceparent = tp;
    return client.publishAsync(p.responseTopic, JSON.stringify(out), {
      qos,
      properties: { correlationData: p.correlationData, contentType: "application/json", userProperties },
    });
  };
  for (let i = 0; i < (input.n ?? 0); i++) await reply("running", { tag: input.tag, i });
  await reply("completed", { tag: input.tag, n: input.n ?? 0, agent: id });
}

try {
  creds = await join(url, version, td, clientId);
  await online();
} catch (e) {
  fail("join", e);
}
say({ ready: id, clientId });

commands(async (c) => {
  if (c.cmd === "emit") {
    for (let i = c.from; i < c.from + c.n; i++) {
      await client.publishAsync(thingTopic(id, "events/tick"), JSON.stringify({ seq: i }), { qos, ...json });
    }
  } else if (c.cmd === "drop") {
    ending = true;
    client.stream.destroy();
    await new Promise((r) => (client.connected ? client.once("close", r) : r()));
    ending = false;
    await online();
  } else if (c.cmd === "exit") {
    ending = true;
    await client.publishAsync(thingTopic(id, "status"), "offline", { qos: 1, retain: true });
    await client.endAsync();
    say({ ok: "exit" });
    process.exit(0);
  } else {
    throw new Error(`unknown command ${c.cmd}`);
  }
  say({ ok: c.cmd });
});
