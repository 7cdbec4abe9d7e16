// ws-group.mjs — an independent member of a group channel on lmos-hub
// (PROTOCOL §7): npm ws + cbor-x on /ws with a token bound to a member,
// and the SSE read of the channel with Node's own fetch.
//
//   node ws-group.mjs ws://127.0.0.1:8080/ws http://127.0.0.1:8080 <token> <group> <n>
//
// It subscribes to the whole channel over WebSocket and SSE, publishes n
// messages {n: i} on topic "seq" (even ones in JSON text frames, odd ones
// in CBOR binary frames), waits for all n on both, unsubscribes, and
// prints one JSON line {ws: [[n, contentType]…], sse: [[n, contentType]…]}.
// Any WebSocket or stream error, an error reply or a missing message
// exits 1.
import WebSocket from 'ws';
import { encode, decode } from 'cbor-x';
import { randomUUID } from 'node:crypto';

const [url, base, token, group, count] = process.argv.slice(2);
const n = Number(count);
const fail = (why) => { process.stderr.write(String(why) + '\n'); process.exit(1); };
setTimeout(() => fail('timed out'), 15000).unref();

const ws = new WebSocket(url, 'lmosprotocol', { headers: { Authorization: 'Bearer ' + token } });
ws.on('error', fail);
ws.on('close', (code) => { if (!closing) fail('websocket closed ' + code); });
let closing = false;
const waiting = new Map();
const got = { ws: [], sse: [] };
let check = () => {};

ws.on('message', (data, isBinary) => {
  const m = isBinary ? decode(data) : JSON.parse(data.toString());
  if (m.messageType === 'groupMessage') {
    if (m.group !== group || m.topic !== 'seq') fail('unexpected ' + JSON.stringify(m));
    got.ws.push([m.data.n, m.contentType]);
    check();
    return;
  }
  const w = waiting.get(m.correlationId);
  if (!w) fail('unexpected ' + JSON.stringify(m));
  waiting.delete(m.correlationId);
  if (m.messageType !== 'acknowledgement') fail(JSON.stringify(m));
  w();
});

function send(msg, binary = false) {
  msg.messageId = randomUUID();
  return new Promise((resolve) => {
    waiting.set(msg.messageId, resolve);
    ws.send(binary ? encode(msg) : JSON.stringify(msg), { binary });
  });
}

async function readSSE(ready) {
  const resp = await fetch(`${base}/api/groups/${group}/channel?topic=%23`, { headers: { Authorization: 'Bearer ' + token } });
  if (resp.status !== 200 || resp.headers.get('content-type') !== 'text/event-stream') fail('sse ' + resp.status);
  ready();
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) { if (!closing) fail('sse ended'); return; }
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = /^event: (.*)$/m.exec(block);
      const data = /^data: (.*)$/m.exec(block);
      if (!ev) continue;
      if (ev[1] !== 'message') fail('sse event ' + block);
      const m = JSON.parse(data[1]);
      got.sse.push([m.data.n, m.contentType]);
      check();
    }
  }
}

ws.on('open', async () => {
  try {
    await send({ messageType: 'subscribeGroup', group, topic: '#' });
    await new Promise((ready) => { readSSE(ready).catch(fail); });
    const all = new Promise((resolve) => {
      check = () => { if (got.ws.length >= n && got.sse.length >= n) resolve(); };
    });
    for (let i = 0; i < n; i++) {
      await send({ messageType: 'publishGroup', group, topic: 'seq', data: { n: i } }, i % 2 === 1);
    }
    await all;
    await send({ messageType: 'unsubscribeGroup', group, topic: '#' });
    closing = true;
    process.stdout.write(JSON.stringify(got) + '\n');
    ws.close();
    process.exit(0);
  } catch (e) {
    fail(e);
  }
});
