// mqtt-wire.mjs — a strict wire-level MQTT client for lmos-hub's
// conformance test (test/e2e/wire_test.go). It sends packets built by
// npm mqtt-packet's generate (the codec mqtt.js uses) on raw TCP sockets
// and feeds every byte the broker writes to mqtt-packet's parser. Any
// parser error, and any of the extra checks below, is reported: the
// parser alone does not check a v5 CONNACK's reason code, the properties
// a packet type may carry, the length of 3.1.1 acknowledgements, or what
// the client's CONNECT asked for (Maximum Packet Size, Receive Maximum,
// Request Problem Information).
//
//   node mqtt-wire.mjs HOST:PORT
//
// Commands, one JSON object per line on stdin (an object {"$b64": "…"}
// anywhere stands for a Buffer):
//   {"op":"open","conn":"a","version":5}      open a socket; 4 = MQTT 3.1.1
//   {"op":"send","conn":"a","packet":{…}}     generate and write a packet
//                                             ("fill": n sets an n-byte payload)
//   {"op":"raw","conn":"a","hex":"…"}         write bytes as they are
//   {"op":"end","conn":"a"}                   close the socket
// Output, one JSON object per line (Buffers as base64 strings):
//   {"ev":"open"|"close","conn":"a"}
//   {"ev":"packet","conn":"a","packet":{…}}   a decoded packet
//   {"ev":"error","conn":"a","error":"…"}     a protocol error
import net from 'node:net';
import readline from 'node:readline';
import mqttPacket from 'mqtt-packet';

const [host, port] = process.argv[2].split(/:(?=\d+$)/);
const conns = new Map();
const out = (o) => process.stdout.write(JSON.stringify(o, (k, v) =>
  v && v.type === 'Buffer' && Array.isArray(v.data) ? Buffer.from(v.data).toString('base64') : v) + '\n');

// The properties each packet type may carry (MQTT 5.0 §2.2.2.2).
const ack = ['reasonString', 'userProperties'];
const allowed = {
  connack: ['sessionExpiryInterval', 'receiveMaximum', 'maximumQoS', 'retainAvailable', 'maximumPacketSize',
    'assignedClientIdentifier', 'topicAliasMaximum', 'reasonString', 'userProperties', 'wildcardSubscriptionAvailable',
    'subscriptionIdentifiersAvailable', 'sharedSubscriptionAvailable', 'serverKeepAlive', 'responseInformation',
    'serverReference', 'authenticationMethod', 'authenticationData'],
  publish: ['payloadFormatIndicator', 'messageExpiryInterval', 'topicAlias', 'responseTopic', 'correlationData',
    'userProperties', 'subscriptionIdentifier', 'contentType'],
  puback: ack, pubrec: ack, pubrel: ack, pubcomp: ack, suback: ack, unsuback: ack,
  disconnect: ['sessionExpiryInterval', 'reasonString', 'userProperties', 'serverReference'],
  auth: ['authenticationMethod', 'authenticationData', 'reasonString', 'userProperties'],
};
// Properties that may appear more than once in one packet.
const repeatable = new Set(['userProperties', 'subscriptionIdentifier']);
// CONNACK reason codes (MQTT 5.0 §3.2.2.2); mqtt-packet does not check them.
const connack5 = new Set([0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C,
  0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F]);
// Packets a server sends to a client (§2.1.2).
const fromServer = new Set(['connack', 'publish', 'puback', 'pubrec', 'pubrel', 'pubcomp', 'suback', 'unsuback',
  'pingresp', 'disconnect', 'auth']);

// violations lists what a strict client must reject in p beyond the parser.
// c holds what the client asked for in its CONNECT and the QoS 1/2
// publishes of the server it has not finished acknowledging.
function violations(p, version, c) {
  const v = [];
  const size = 1 + varintSize(p.length) + p.length;
  if (c.maxPacketSize && size > c.maxPacketSize) v.push(`${p.cmd} of ${size} bytes over the client's maximum ${c.maxPacketSize}`);
  if (p.cmd === 'publish' && p.qos > 0 && !c.inflight.has(p.messageId)) {
    c.inflight.add(p.messageId);
    if (c.inflight.size > c.receiveMaximum) v.push(`${c.inflight.size} QoS 1/2 publishes in flight, over the client's receive maximum ${c.receiveMaximum}`);
  }
  if (c.noProblemInfo && !['publish', 'connack', 'disconnect'].includes(p.cmd) &&
    (p.properties?.reasonString !== undefined || p.properties?.userProperties !== undefined)) {
    v.push(`${p.cmd} carries problem information the client refused`);
  }
  if (!fromServer.has(p.cmd)) v.push(`a server never sends ${p.cmd}`);
  if (version === 5) {
    if (p.cmd === 'connack' && !connack5.has(p.reasonCode)) v.push(`CONNACK reason code 0x${p.reasonCode.toString(16)}`);
    if (p.cmd === 'connack' && p.reasonCode !== 0 && p.sessionPresent) v.push('session present on a refusing CONNACK');
    for (const [name, val] of Object.entries(p.properties ?? {})) {
      if (!(allowed[p.cmd] ?? []).includes(name)) v.push(`${p.cmd} carries property ${name}`);
      if (Array.isArray(val) && !repeatable.has(name)) v.push(`${p.cmd} carries ${name} more than once`);
    }
    if (p.cmd === 'publish') {
      const ids = [p.properties?.subscriptionIdentifier ?? []].flat();
      if (ids.includes(0)) v.push('subscription identifier 0');
    }
  } else {
    if (p.cmd === 'connack' && p.returnCode > 5) v.push(`CONNACK return code ${p.returnCode}`);
    if (p.cmd === 'connack' && p.returnCode !== 0 && p.sessionPresent) v.push('session present on a refusing CONNACK');
    if (['puback', 'pubrec', 'pubrel', 'pubcomp', 'unsuback'].includes(p.cmd) && p.length !== 2) {
      v.push(`MQTT 3.1.1 ${p.cmd} of remaining length ${p.length}`);
    }
    if (p.cmd === 'disconnect' || p.cmd === 'auth') v.push(`MQTT 3.1.1 has no server ${p.cmd}`);
  }
  if (p.cmd === 'publish' && /[+#]/.test(p.topic)) v.push(`publish on topic ${p.topic} with a wildcard`);
  return v;
}

function varintSize(n) {
  return n < 128 ? 1 : n < 16384 ? 2 : n < 2097152 ? 3 : 4;
}

// buffers turns {"$b64": "…"} objects back into Buffers.
function buffers(x) {
  if (Array.isArray(x)) return x.map(buffers);
  if (x && typeof x === 'object') {
    if (typeof x.$b64 === 'string') return Buffer.from(x.$b64, 'base64');
    return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, buffers(v)]));
  }
  return x;
}

function open(name, version) {
  const sock = net.connect({ host, port: Number(port) });
  const parser = mqttPacket.parser({ protocolVersion: version });
  const c = { sock, version, failed: false, inflight: new Set(), receiveMaximum: 65535, maxPacketSize: 0, noProblemInfo: false };
  conns.set(name, c);
  sock.on('connect', () => out({ ev: 'open', conn: name }));
  sock.on('data', (chunk) => {
    if (c.failed) return; // the parser lost its place: nothing after counts
    parser.parse(chunk);
  });
  parser.on('packet', (p) => {
    const { cmd, messageId, reasonCode, returnCode, sessionPresent, granted, topic, payload, qos, retain, dup,
      properties, length } = p;
    out({ ev: 'packet', conn: name, packet: { cmd, messageId, reasonCode, returnCode, sessionPresent, granted,
      topic, payload, qos, retain, dup, properties, length } });
    for (const msg of violations(p, version, c)) out({ ev: 'error', conn: name, error: msg });
  });
  parser.on('error', (err) => {
    c.failed = true;
    out({ ev: 'error', conn: name, error: 'mqtt-packet: ' + err.message });
  });
  sock.on('error', (err) => {
    if (err.code !== 'ECONNRESET' && err.code !== 'EPIPE') out({ ev: 'error', conn: name, error: 'socket: ' + err.message });
  });
  sock.on('close', () => out({ ev: 'close', conn: name }));
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const cmd = JSON.parse(line);
  const c = conns.get(cmd.conn);
  switch (cmd.op) {
    case 'open':
      open(cmd.conn, cmd.version);
      break;
    case 'send': {
      const pk = buffers(cmd.packet);
      if (cmd.fill) pk.payload = Buffer.alloc(cmd.fill, 0x61);
      if (pk.cmd === 'connect') {
        c.receiveMaximum = pk.properties?.receiveMaximum ?? 65535;
        c.maxPacketSize = pk.properties?.maximumPacketSize ?? 0;
        c.noProblemInfo = pk.properties?.requestProblemInformation === false;
      }
      // The flow of a server publish ends with the client's PUBACK or PUBCOMP.
      if (pk.cmd === 'puback' || pk.cmd === 'pubcomp') c.inflight.delete(pk.messageId);
      c.sock.write(mqttPacket.generate(pk, { protocolVersion: c.version }));
      break;
    }
    case 'raw':
      c.sock.write(Buffer.from(cmd.hex, 'hex'));
      break;
    case 'end':
      c.sock.end();
      break;
    default:
      out({ ev: 'error', conn: cmd.conn, error: 'unknown command ' + cmd.op });
  }
});
rl.on('close', () => {
  for (const c of conns.values()) c.sock.destroy();
});
