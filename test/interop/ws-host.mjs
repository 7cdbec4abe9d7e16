// ws-host.mjs — opens one WebSocket (npm ws) with a chosen Host and Origin,
// as a page on a DNS-rebinding domain would, and reports what the hub did.
//
//   node ws-host.mjs ws://127.0.0.1:8080/ws <subprotocol> <host> <origin>
//
// Prints one JSON line: {"opened":true,"protocol":…} when the upgrade
// succeeded, or {"status":…,"contentType":…,"body":…} when the hub answered
// with a plain HTTP response instead.
import WebSocket from 'ws';

const [url, protocol, host, origin] = process.argv.slice(2);
const ws = new WebSocket(url, protocol, { headers: { Host: host }, origin, handshakeTimeout: 5000 });
const out = (o) => { process.stdout.write(JSON.stringify(o) + '\n'); };

ws.on('open', () => {
  out({ opened: true, protocol: ws.protocol });
  ws.close();
});
ws.on('unexpected-response', (req, res) => {
  let body = '';
  res.setEncoding('utf8');
  res.on('data', (c) => { body += c; });
  res.on('end', () => {
    out({ status: res.statusCode, contentType: res.headers['content-type'], body });
    // ws leaves the refused request's socket open; the answer is all we need.
    process.exit(0);
  });
});
ws.on('error', (err) => {
  out({ error: String(err && err.message || err) });
  process.exitCode = 1;
});
