// ws-envelope.mjs — an independent WebSocket client of lmos-hub's /ws
// (npm ws + cbor-x), speaking the LMOS message envelope (PROTOCOL §5) in
// the spec's spelling and kotlin-wot's.
//
//   node ws-envelope.mjs ws://127.0.0.1:8080/ws <thingId>
//
// Prints one JSON line per step; after {"step":"subscribed"} it waits for
// one event of "alarm" (the caller makes the agent emit it).
import WebSocket from 'ws';
import { encode, decode } from 'cbor-x';
import { randomUUID } from 'node:crypto';

const [url, thingId] = process.argv.slice(2);
const ws = new WebSocket(url, 'lmosprotocol');
const waiting = new Map(); // messageId → {resolve, replies, final}
const events = [];
let onEvent = null;

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

ws.on('message', (data, isBinary) => {
  const m = isBinary ? decode(data) : JSON.parse(data.toString());
  if (m.messageType === 'event') {
    events.push(m);
    if (onEvent) onEvent();
    return;
  }
  const w = waiting.get(m.correlationId);
  if (!w) return;
  w.replies.push(m);
  if (w.final(m)) {
    waiting.delete(m.correlationId);
    w.resolve(w.replies);
  }
});

// send sends msg (CBOR when binary) and resolves with its replies up to
// the one final(m) accepts.
function send(msg, final = () => true, binary = false, idKey = 'messageId') {
  const id = randomUUID();
  msg[idKey] = id;
  return new Promise((resolve, reject) => {
    waiting.set(id, { resolve, replies: [], final });
    ws.send(binary ? encode(msg) : JSON.stringify(msg), { binary });
    setTimeout(() => reject(new Error('no reply to ' + msg.messageType)), 5000).unref();
  });
}

const done = (m) => m.messageType !== 'actionStatus' || m.status === 'completed' || m.status === 'failed';

ws.on('open', async () => {
  try {
    out({ step: 'protocol', value: ws.protocol });
    let r = await send({ messageType: 'readProperty', thingId, name: 'temp' });
    out({ step: 'read', reply: r[0] });
    r = await send({ messageType: 'invokeAction', thingId, action: 'count' }, done);
    out({ step: 'invoke', statuses: r.map((m) => [m.status, m.output ?? null]) });
    // kotlin-wot spellings: thingID, messageID, property, lower-case subscribeevent.
    r = await send({ messageType: 'readProperty', thingID: thingId, property: 'temp' }, () => true, false, 'messageID');
    out({ step: 'kotlin-read', reply: r[0] });
    // CBOR binary frames.
    r = await send({ messageType: 'invokeAction', thingId, action: 'add', input: { a: 2, b: 40 } }, done, true);
    out({ step: 'cbor-invoke', reply: r[r.length - 1] });
    // Unknown message type.
    r = await send({ messageType: 'frobnicate', thingId });
    out({ step: 'unknown', reply: r[0] });
    r = await send({ messageType: 'subscribeevent', thingID: thingId, event: 'alarm' });
    out({ step: 'subscribed', reply: r[0] });
    await new Promise((resolve, reject) => {
      onEvent = resolve;
      if (events.length) resolve();
      setTimeout(() => reject(new Error('no event')), 5000).unref();
    });
    out({ step: 'event', event: events[0] });
    ws.close(1000);
  } catch (e) {
    out({ step: 'error', error: String(e) });
    process.exit(1);
  }
});
ws.on('error', (e) => { out({ step: 'error', error: String(e) }); process.exit(1); });
