// mqttjs-groups.mjs — mqtt.js 5.16 on an lmos-hub group channel (issue 15).
// Any 'error' event, an unexpected close or a server DISCONNECT fails the
// run (exit 1); every step prints one JSON line.
//
//   node mqttjs-groups.mjs mqtt://HOST:PORT VERSION GID N MEMBER_USER MEMBER_PASS OTHER_USER OTHER_PASS
//
// The member subscribes to lmos/v1/groups/GID/# (QoS 1) and to a wildcard
// group level (refused); the other Thing (no member) subscribes to the
// channel (refused) and publishes to it at QoS 1 (MQTT 5: PUBACK 0x87);
// then the member publishes N messages, QoS 0 and 1 alternating, and must
// get all N back, and the other must get none.
import mqtt from 'mqtt';

const [url, version, gid, n, mUser, mPass, oUser, oPass] = process.argv.slice(2);
const v = Number(version);
const count = Number(n);
const topic = `lmos/v1/groups/${gid}/chat`;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (what) => {
  out({ step: 'error', error: String(what) });
  process.exit(1);
};
setTimeout(() => fail('timed out'), 15000).unref();

function connect(clientId, username, password) {
  return new Promise((resolve) => {
    const c = mqtt.connect(url, { clientId, protocolVersion: v, reconnectPeriod: 0, clean: true, username, password });
    c.on('error', (e) => fail(`${clientId}: error event: ${e.message}`));
    c.on('disconnect', (p) => fail(`${clientId}: server DISCONNECT ${p.reasonCode}`));
    c.on('close', () => { if (!c.ending) fail(`${clientId}: connection closed`); });
    c.on('connect', () => resolve(c));
  });
}

// subscribe resolves with the SUBACK's code as read off the wire (mqtt.js
// reports a refusal as the callback's error, not as an 'error' event).
const subscribe = (c, filter) => new Promise((resolve) => {
  const onPacket = (p) => {
    if (p.cmd !== 'suback') return;
    c.off('packetreceive', onPacket);
    resolve(p.granted[0]);
  };
  c.on('packetreceive', onPacket);
  c.subscribe(filter, { qos: 1 }, () => {});
});

const publish = (c, t, payload, qos) => new Promise((resolve) => {
  c.publish(t, payload, { qos }, (err) => resolve(err ? (err.code ?? err.message) : 0));
});

const member = await connect(`js-member-${v}`, mUser, mPass);
const other = await connect(`js-other-${v}`, oUser, oPass);
const got = [];
const otherGot = [];
member.on('message', (t, p) => { if (t === topic) got.push(p.toString()); });
other.on('message', (t, p) => otherGot.push(`${t} ${p}`));

out({ step: 'member-subscribe', code: await subscribe(member, `lmos/v1/groups/${gid}/#`) });
out({ step: 'member-wildcard-group', code: await subscribe(member, 'lmos/v1/groups/+/chat') });
out({ step: 'other-subscribe', code: await subscribe(other, topic) });
out({ step: 'other-shared', code: await subscribe(other, `$share/js/${topic}`) });
out({ step: 'other-publish', code: await publish(other, topic, 'intruder', 1) });

const done = new Promise((resolve) => {
  const check = () => (got.length >= count ? resolve() : setTimeout(check, 5));
  check();
});
for (let i = 0; i < count; i++) {
  const code = await publish(member, topic, `m${i}`, i % 2);
  if (code !== 0) fail(`member publish ${i}: ${code}`);
}
await done;
// A round trip through the broker after the last message: anything owed
// to the other client would have arrived before this PUBACK's successor.
await publish(member, topic, 'last', 1);
const expected = [...Array(count).keys()].map((i) => `m${i}`);
const missing = expected.filter((m) => !got.includes(m));
out({ step: 'member-received', n: got.filter((m) => m !== 'last').length, missing, otherGot, intruder: got.includes('intruder') });
member.ending = true;
other.ending = true;
await member.endAsync();
await other.endAsync();
out({ step: 'done' });
