// mqttjs-consumer.mjs — an mqtt.js 5 consumer of lmos-hub (PROTOCOL §4.3).
//
//   node mqttjs-consumer.mjs MQTT_URL
//
// MQTT 5, one reply inbox lmos/v1/clients/{clientId}/r: requests differ
// only by their Correlation Data, so every result must carry its own.
// Commands on stdin (JSON lines):
//   {"cmd":"batch","thing","action","tags":[…],"n":k,"inflight":w,"qos":q}
//       invokes action once per tag ({n: k, tag}, traceparent user
//       property), at most w at a time; prints one line per invocation
//       {"result": tag, "running": [i…], "completed": output, "traced"}
//       (traced: the final result echoed the request's traceparent)
//       once its final result arrived.
//   {"cmd":"fire","thing","action","tags":[…],"n":k,"qos":q}: the same
//       invocations without Response Topic (fire-and-forget, §10).
//   {"cmd":"pub","topic":t,"data":v}: publishes v as JSON at QoS 1.
//   {"cmd":"sub","topic":t,"qos":q}: subscribes; every message on t is
//       printed {"msg": t, "data": payload}.
//   {"cmd":"exit"}
// Reports {"ok": cmd} after each. A result for an unknown correlation, one
// after the final result, without lmos-status, with someone else's tag, or
// any mqtt.js error is an {"error"} line and exit 1.
import { commands, connect, fail, parse, say, subscribe, thingTopic, userProp } from "./mqttjs.mjs";

const [url] = process.argv.slice(2);
if (!url) {
  console.error("usage: node mqttjs-consumer.mjs MQTT_URL");
  process.exit(2);
}
const clientId = `js-consumer-${process.pid}-${Math.random().toString(16).slice(2, 8)}`;
const inbox = `lmos/v1/clients/${clientId}/r`;
let ending = false;
const client = await connect(url, { protocolVersion: 5, clientId }, "consumer", () => ending).catch((e) =>
  fail("connect", e),
);
const pending = new Map(); // correlation → {tag, running, traceparent, done}
const subs = new Set();

client.on("message", (topic, payload, packet) => {
  if (subs.has(topic)) return say({ msg: topic, data: parse(topic, payload) });
  if (topic !== inbox) return fail("message", `on unexpected topic ${topic}`);
  const corr = packet.properties?.correlationData?.toString();
  const req = pending.get(corr);
  if (!req) return fail("result", `unknown correlation data ${JSON.stringify(corr)}`);
  const status = userProp(packet, "lmos-status");
  const out = parse("result", payload);
  if (out?.tag !== req.tag) return fail("result", `for ${req.tag} carries ${JSON.stringify(out)}`);
  if (status === "running") {
    req.running.push(out.i);
  } else if (status === "completed") {
    pending.delete(corr);
    const tp = userProp(packet, "traceparent");
    if (tp !== undefined && tp !== req.traceparent) return fail("result", `traceparent ${tp} for ${req.traceparent}`);
    say({ result: req.tag, running: req.running, completed: out, traced: tp !== undefined });
    req.done();
  } else {
    fail("result", `lmos-status ${JSON.stringify(status)} for ${req.tag}: ${payload}`);
  }
});
await subscribe(client, [inbox], 1).catch((e) => fail("subscribe inbox", e));
say({ ready: clientId });

function invoke(c, tag) {
  return new Promise((resolve, reject) => {
    const traceparent = `00-${Buffer.from(tag.padEnd(16, "-")).toString("hex").slice(0, 32)}-00f067aa0ba902b7-01`;
    pending.set(tag, { tag, running: [], traceparent, done: resolve });
    client
      .publishAsync(thingTopic(c.thing, `actions/${c.action}`), JSON.stringify({ n: c.n, tag }), {
        qos: c.qos ?? 1,
        properties: {
          responseTopic: inbox,
          correlationData: Buffer.from(tag),
          contentType: "application/json",
          userProperties: { traceparent },
        },
      })
      .catch(reject);
  });
}

commands(async (c) => {
  if (c.cmd === "batch") {
    const queue = [...c.tags];
    const worker = async () => {
      while (queue.length) await invoke(c, queue.shift());
    };
    await Promise.all(Array.from({ length: c.inflight ?? 1 }, worker));
  } else if (c.cmd === "fire") {
    for (const tag of c.tags) {
      await client.publishAsync(thingTopic(c.thing, `actions/${c.action}`), JSON.stringify({ n: c.n, tag }), {
        qos: c.qos ?? 1,
      });
    }
  } else if (c.cmd === "pub") {
    await client.publishAsync(c.topic, JSON.stringify(c.data), { qos: 1, properties: { contentType: "application/json" } });
  } else if (c.cmd === "sub") {
    subs.add(c.topic);
    await subscribe(client, [c.topic], c.qos ?? 1);
  } else if (c.cmd === "exit") {
    ending = true;
    await client.endAsync();
    say({ ok: "exit" });
    process.exit(0);
  } else {
    throw new Error(`unknown command ${c.cmd}`);
  }
  say({ ok: c.cmd });
});
