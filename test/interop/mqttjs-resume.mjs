// mqttjs-resume.mjs — mqtt.js 5.16 resumes a session the hub holds QoS 1/2
// messages for (mqtt/resume_test.go). mqtt.js fails with 0x93 (Receive
// Maximum exceeded) when a QoS 2 PUBLISH comes while receiveMaximum of
// them await their PUBREL. Any 'error' event, server DISCONNECT or
// unexpected close fails the run (exit 1); so does a resent PUBLISH
// without DUP. Prints "msg TOPIC PAYLOAD" per PUBLISH as it arrives, and
// ends once COUNT have come and each was acknowledged (PUBACK or PUBCOMP).
//
//   node mqttjs-resume.mjs mqtt://HOST:PORT VERSION(4|5) CLIENTID USER PASS RECEIVEMAX(0: none) COUNT
import mqtt from 'mqtt';

const [url, version, clientId, username, password, rm, count] = process.argv.slice(2);
const want = Number(count);
const out = (s) => process.stdout.write(s + '\n');
const fail = (what) => {
  out(`error ${what}`);
  process.exit(1);
};
setTimeout(() => fail(`timed out after ${got} of ${want} messages, ${acked} acknowledged`), 20000).unref();

const properties = { sessionExpiryInterval: 3600 };
if (Number(rm) > 0) properties.receiveMaximum = Number(rm);
const c = mqtt.connect(url, {
  clientId, username, password, protocolVersion: Number(version), clean: false, reconnectPeriod: 0,
  ...(version === '5' ? { properties } : {}),
});
let got = 0;
let acked = 0;
let ending = false;
const maybeEnd = () => {
  if (got === want && acked === want && !ending) {
    ending = true;
    c.end(false, () => process.exit(0));
  }
};
c.on('error', (e) => fail(`error event: ${e.message}`));
c.on('disconnect', (p) => fail(`server DISCONNECT ${p.reasonCode}`));
c.on('close', () => { if (!ending) fail('connection closed'); });
c.on('connect', (ack) => { if (!ack.sessionPresent) fail('no session present'); });
c.on('packetreceive', (p) => {
  if (p.cmd !== 'publish') return;
  if (!p.dup) fail(`PUBLISH ${p.messageId} resent without DUP`);
  got++;
  out(`msg ${p.topic} ${p.payload.toString()}`);
});
c.on('packetsend', (p) => {
  if (p.cmd === 'puback' || p.cmd === 'pubcomp') {
    acked++;
    setImmediate(maybeEnd); // 'packetsend' comes before the packet is written

  }
});
