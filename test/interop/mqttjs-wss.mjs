// mqttjs-wss.mjs — mqtt.js, as a browser page's MQTT client would, over the
// hub's /mqtt on WSS (MQTT over WebSocket over TLS). Usage:
//   node mqttjs-wss.mjs <wss-url> <ca.pem|-> <count>
// With a CA file it trusts the hub's certificate through it, subscribes,
// publishes count QoS 1 messages and prints {"got": n} once all arrived.
// With "-" it trusts nothing but the system's CAs and prints
// {"refused": "<reason>"} when the TLS handshake fails. Any other error,
// a DISCONNECT or an unexpected close prints {"error": …} and exits 1.
import fs from "node:fs";
import { connect, fail, say, subscribe } from "./mqttjs.mjs";

const [url, caFile, countArg] = process.argv.slice(2);
const count = Number(countArg ?? 10);

if (caFile === "-") {
  try {
    const c = await connect(url, { protocolVersion: 5, clientId: "wss-untrusting" }, "untrusting");
    c.end(true);
    fail("untrusting", "connected without trusting the certificate");
  } catch (e) {
    say({ refused: e.message ?? String(e) });
    process.exit(0);
  }
}

let ending = false;
const c = await connect(url, { protocolVersion: 5, clientId: "wss-browser", ca: fs.readFileSync(caFile) }, "wss", () => ending).catch((e) =>
  fail("wss connect", e),
);
const topic = "lmos/v1/clients/wss-browser/echo";
let got = 0;
const seen = new Set();
c.on("message", (t, payload) => {
  if (t !== topic) fail("wss", `message on ${t}`);
  const n = Number(payload.toString());
  if (seen.has(n)) fail("wss", `message ${n} twice`);
  seen.add(n);
  got++;
  if (got === count) {
    say({ got });
    ending = true;
    c.end(false, {}, () => process.exit(0));
  }
});
await subscribe(c, [topic], 1).catch((e) => fail("wss subscribe", e));
for (let i = 0; i < count; i++) {
  await c.publishAsync(topic, String(i), { qos: 1 }).catch((e) => fail("wss publish", e));
}
setTimeout(() => fail("wss", `got ${got} of ${count} messages`), 10000);
