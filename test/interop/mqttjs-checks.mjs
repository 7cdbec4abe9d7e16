// mqttjs-checks.mjs — mqtt.js 5.16 (npm mqtt, the client of node-wot and of
// browsers) against lmos-hub. Any 'error' event, an unexpected close or a
// server DISCONNECT fails the run (exit 1); every step prints one JSON
// line.
//
//   node mqttjs-checks.mjs inbox mqtt://HOST:PORT VERSION
//     issue 10's reproduction: client A publishes QoS 1 with the user
//     property lmos-status=completed to B's inbox, then B publishes twice
//     to A's inbox; each must receive all it was owed.
//   node mqttjs-checks.mjs request mqtt://HOST:PORT TOPIC...
//     an MQTT 5 consumer publishes a QoS 1 request with a Response Topic
//     in its inbox to each TOPIC and prints the PUBACK reason code and
//     the result it got.
import mqtt from 'mqtt';

const [mode, url, ...args] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (what) => {
  out({ step: 'error', error: String(what) });
  process.exit(1);
};
setTimeout(() => fail('timed out'), 10000).unref();

// connect resolves with a connected client that fails the run on any
// protocol error; acks records the reason code of every PUBACK it gets.
function connect(clientId, protocolVersion) {
  return new Promise((resolve) => {
    const c = mqtt.connect(url, { clientId, protocolVersion, reconnectPeriod: 0, clean: true });
    c.acks = new Map();
    c.on('error', (e) => fail(`${clientId}: error event: ${e.message}`));
    c.on('disconnect', (p) => fail(`${clientId}: server DISCONNECT ${p.reasonCode}`));
    c.on('close', () => { if (!c.ending) fail(`${clientId}: connection closed`); });
    c.on('packetreceive', (p) => { if (p.cmd === 'puback') c.acks.set(p.messageId, p.reasonCode ?? null); });
    c.on('connect', () => resolve(c));
  });
}

const end = async (...clients) => {
  for (const c of clients) {
    c.ending = true;
    await c.endAsync();
  }
};

// received resolves once client c got n messages on topics under prefix.
function received(c, prefix, n) {
  const got = [];
  return new Promise((resolve) => {
    c.on('message', (topic, payload, packet) => {
      if (!topic.startsWith(prefix)) return;
      got.push({ topic, payload: payload.toString(), user: packet.properties?.userProperties ?? null });
      if (got.length === n) resolve(got);
    });
  });
}

async function inbox(version) {
  const v = Number(version);
  const a = await connect(`js-a-${v}`, v);
  const b = await connect(`js-b-${v}`, v);
  const inboxA = `lmos/v1/clients/js-a-${v}/`;
  const inboxB = `lmos/v1/clients/js-b-${v}/`;
  await a.subscribeAsync(inboxA + '#', { qos: 1 });
  await b.subscribeAsync(inboxB + '#', { qos: 1 });
  const gotA = received(a, inboxA, 2);
  const gotB = received(b, inboxB, 1);
  const opts = { qos: 1 };
  if (v === 5) opts.properties = { userProperties: { 'lmos-status': 'completed' }, correlationData: Buffer.from('c1') };
  await a.publishAsync(inboxB + 'replies', '{"ok":true}', opts);
  out({ step: 'published', client: 'a' });
  await b.publishAsync(inboxA + 'replies', 'first', { qos: 1 });
  await b.publishAsync(inboxA + 'replies', 'second', { qos: 0 });
  out({ step: 'b-received', messages: await gotB });
  out({ step: 'a-received', messages: await gotA });
  await end(a, b);
}

async function request(topics) {
  const c = await connect('js-consumer', 5);
  const box = 'lmos/v1/clients/js-consumer/r';
  await c.subscribeAsync(box, { qos: 1 });
  const results = new Map();
  c.on('message', (topic, payload, packet) => {
    const corr = packet.properties?.correlationData?.toString();
    results.get(corr)?.({ status: packet.properties?.userProperties?.['lmos-status'] ?? null,
      contentType: packet.properties?.contentType ?? null, payload: JSON.parse(payload.toString()) });
  });
  for (const [i, topic] of topics.entries()) {
    const corr = `req-${i}`;
    const result = new Promise((resolve) => results.set(corr, resolve));
    const pk = await c.publishAsync(topic, '{"a":1}', { qos: 1, properties: {
      responseTopic: box, correlationData: Buffer.from(corr), contentType: 'application/json' } });
    const puback = c.acks.get(pk?.messageId) ?? null;
    out({ step: 'result', topic, puback, result: await result });
  }
  await end(c);
}

try {
  if (mode === 'inbox') await inbox(args[0]);
  else if (mode === 'request') await request(args);
  else fail('unknown mode ' + mode);
} catch (e) {
  fail(e.stack ?? e);
}
