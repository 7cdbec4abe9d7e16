// ws-join-wait.mjs — an independent WebSocket agent (npm ws) that registers
// on lmos-hub's /ws in join mode approve and waits for the decision.
//
//   node ws-join-wait.mjs ws://127.0.0.1:8080/ws
//
// JSON lines as mqttjs.mjs: {"ready"} once open; commands on stdin:
//   {"cmd":"register","td":{…}}  sends registerThing; every reply to it is
//                                reported as {"reply": message}
//   {"cmd":"emit","thingId","event"} sends an event for thingId; a reply
//                                (an error) is reported as {"reply": message}
//   {"cmd":"exit"}               closes the socket normally.
// A socket error or a close it did not ask for is an {"error"} line, exit 1.
import WebSocket from 'ws';
import { randomUUID } from 'node:crypto';
import readline from 'node:readline';

const [url] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (what) => { out({ error: what }); process.exit(1); };
let ending = false;

const ws = new WebSocket(url, 'lmosprotocol');
ws.on('error', (e) => fail(`socket: ${e.message}`));
ws.on('close', (code) => { if (!ending) fail(`closed by the hub: ${code}`); });
ws.on('message', (data, isBinary) => {
  if (isBinary) fail('binary frame for a text request');
  out({ reply: JSON.parse(data.toString()) });
});
ws.on('open', () => {
  out({ ready: true });
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    const c = JSON.parse(line);
    switch (c.cmd) {
      case 'register':
        ws.send(JSON.stringify({ messageType: 'registerThing', messageId: randomUUID(), thingId: c.td.id, td: c.td }));
        break;
      case 'emit':
        ws.send(JSON.stringify({ messageType: 'event', messageId: randomUUID(), thingId: c.thingId, event: c.event, data: 'x' }));
        break;
      case 'exit':
        ending = true;
        ws.close(1000);
        out({ ok: c.cmd });
        ws.on('close', () => process.exit(0));
        return;
      default:
        fail(`unknown command ${line}`);
    }
    out({ ok: c.cmd });
  });
});
