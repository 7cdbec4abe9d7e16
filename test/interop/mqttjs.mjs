// mqttjs.mjs — what the mqtt.js agent and consumer scripts share: a strict
// connection (any protocol error the client reports ends the script with
// an "error" line and exit 1), the LMOS join (PROTOCOL §4.4), and the
// line protocol with the Go test (JSON lines: commands on stdin, reports on
// stdout).
import mqtt from "mqtt";
import readline from "node:readline";

export const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// fail reports and exits: the Go test fails on any "error" line.
export function fail(what, err) {
  say({ error: `${what}: ${err?.message ?? err}` });
  process.exit(1);
}

// topicKey is the {tid} of a Thing id (PROTOCOL §1).
export const topicKey = (id) => id.replace(/[%/+#]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
export const thingTopic = (id, rest) => `lmos/v1/things/${topicKey(id)}/${rest}`;

// connect opens one MQTT session and resolves once CONNACK accepted it.
// From then on every error, every DISCONNECT from the server and every
// close the script did not ask for (ending() false) is fatal.
export function connect(url, opts, name, ending = () => false) {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 5000, clean: true, keepalive: 30, ...opts });
    let up = false;
    c.on("error", (e) => (up ? fail(`${name}: mqtt.js error`, e) : reject(e)));
    c.on("disconnect", (p) => fail(`${name}: DISCONNECT from the server`, `reason ${p.reasonCode}`));
    c.on("close", () => {
      if (!up) reject(new Error(`${name}: closed before CONNACK`));
      else if (!ending()) fail(name, "connection closed unexpectedly");
    });
    c.on("connect", (ack) => {
      if (ack.reasonCode) return reject(new Error(`${name}: CONNACK reason ${ack.reasonCode}`));
      up = true;
      resolve(c);
    });
  });
}

// subscribe subscribes and fails on any refused filter.
export async function subscribe(c, filters, qos) {
  const granted = await c.subscribeAsync(filters, { qos });
  for (const g of granted) {
    if (g.qos >= 0x80) throw new Error(`SUBACK refused ${g.topic}: ${g.qos}`);
  }
}

// userProp reads one user property (mqtt.js gives a string or a list).
export function userProp(packet, key) {
  const v = packet.properties?.userProperties?.[key];
  return Array.isArray(v) ? v[v.length - 1] : v;
}

// join publishes td anonymously and returns the credentials of the
// accepted result.
export async function join(url, version, td, clientId) {
  let done = false;
  const c = await connect(url, { protocolVersion: version, clientId: clientId + "-join" }, "join", () => done);
  const result = new Promise((resolve, reject) => {
    c.on("message", (topic, payload) => {
      if (topic !== thingTopic(td.id, "td/result")) return;
      try {
        resolve(JSON.parse(payload.toString()));
      } catch (e) {
        reject(e);
      }
    });
  });
  await subscribe(c, [thingTopic(td.id, "td/result")], 1);
  const props = version === 5 ? { properties: { contentType: "application/td+json" } } : {};
  await c.publishAsync(thingTopic(td.id, "td"), JSON.stringify(td), { qos: 1, retain: true, ...props });
  const res = await Promise.race([result, new Promise((_, rej) => setTimeout(() => rej(new Error("no td/result")), 5000))]);
  done = true;
  await c.endAsync();
  if (res.status !== "accepted" || !res.credentials) throw new Error(`join refused: ${JSON.stringify(res)}`);
  return res.credentials;
}

// commands calls handle for each JSON line on stdin, one at a time.
export function commands(handle) {
  const rl = readline.createInterface({ input: process.stdin });
  let chain = Promise.resolve();
  rl.on("line", (line) => {
    if (!line.trim()) return;
    chain = chain.then(() => handle(JSON.parse(line))).catch((e) => fail(`command ${line}`, e));
  });
  rl.on("close", () => chain.then(() => process.exit(0)));
}

// parse decodes a JSON payload; a payload that does not decode is fatal.
export function parse(what, payload) {
  try {
    return payload.length ? JSON.parse(payload.toString()) : null;
  } catch (e) {
    fail(`${what}: payload ${JSON.stringify(payload.toString())}`, e);
  }
}
