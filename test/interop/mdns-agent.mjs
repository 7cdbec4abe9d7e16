// mdns-agent.mjs — an mDNS agent written with npm multicast-dns, an
// implementation lmos-hub's authors did not write: it serves a TD over
// node's http, announces it as a _wot._tcp Thing, answers queries, asks for
// the hub's directory (_directory._sub._wot._tcp) and prints what it finds
// as JSON lines. SIGTERM sends goodbyes.
//
//   [MDNS_TTL=1] node mdns-agent.mjs <thing id> <title> <interface address> <port>
import http from 'node:http';
import makeMdns from 'multicast-dns';

const [id, title, addr, port] = process.argv.slice(2);
const td = JSON.stringify({
  '@context': 'https://www.w3.org/2022/wot/td/v1.1',
  id, title,
  securityDefinitions: { nosec_sc: { scheme: 'nosec' } },
  security: 'nosec_sc',
});
const server = http.createServer((req, res) => {
  if (req.url === '/thing.td.json') {
    res.writeHead(200, { 'Content-Type': 'application/td+json' });
    res.end(td);
  } else {
    res.writeHead(404).end();
  }
});
server.listen(Number(port), addr);

// MDNS_TTL sets the IP TTL of what it sends (multicast-dns's default: 255).
const ttl = Number(process.env.MDNS_TTL || 255);
const mdns = makeMdns({ interface: addr, bind: '0.0.0.0', ip: '224.0.0.251', port: 5353, loopback: false, ttl });
const inst = `${title}._wot._tcp.local`;
const host = 'node-agent.local';
const records = (ttl) => [
  { name: '_wot._tcp.local', type: 'PTR', ttl, data: inst },
  { name: inst, type: 'SRV', ttl, flush: true, data: { target: host, port: Number(port), priority: 0, weight: 0 } },
  { name: inst, type: 'TXT', ttl, flush: true, data: ['td=/thing.td.json', 'type=Thing'] },
  { name: host, type: 'A', ttl, flush: true, data: addr },
];

mdns.on('query', (q) => {
  const asked = q.questions.some((x) => [ '_wot._tcp.local', inst.toLowerCase(), host ].includes(x.name.toLowerCase()));
  if (asked) mdns.respond({ answers: records(120) });
});

const seen = new Set();
mdns.on('response', (r) => {
  if (process.env.MDNS_DEBUG) console.error(JSON.stringify(r.answers.map((a) => [a.name, a.type])));
  const all = [...r.answers, ...(r.additionals || [])];
  for (const a of all) {
    if (a.type !== 'PTR' || a.name.toLowerCase() !== '_directory._sub._wot._tcp.local' || seen.has(a.data)) continue;
    const txt = all.find((x) => x.type === 'TXT' && x.name.toLowerCase() === a.data.toLowerCase());
    const srv = all.find((x) => x.type === 'SRV' && x.name.toLowerCase() === a.data.toLowerCase());
    if (!txt || !srv) continue;
    seen.add(a.data);
    console.log(JSON.stringify({ directory: a.data, port: srv.data.port, txt: txt.data.map((b) => b.toString()) }));
  }
});

mdns.on('ready', () => {
  mdns.respond({ answers: records(120) });
  setTimeout(() => mdns.respond({ answers: records(120) }), 1000);
  mdns.query({ questions: [{ name: '_directory._sub._wot._tcp.local', type: 'PTR' }] });
  console.log(JSON.stringify({ announced: inst }));
});

process.on('SIGTERM', () => {
  mdns.respond({ answers: records(0) }, () => {
    mdns.destroy();
    server.close();
    process.exit(0);
  });
});
