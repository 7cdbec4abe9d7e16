// mqttjs-inbox.mjs — mqtt.js 5.16 connects with a client id from a local
// address of its own (issue 24 point 8, test/e2e/inbox_test.go): prints
// one JSON line {"connack": reason code, "v"} and ends, exit 0 (when
// connected, after subscribing to the client's inbox). Any other outcome
// is {"error"} and exit 1.
//
//   node mqttjs-inbox.mjs HOST PORT LOCALADDR VERSION(4|5) CLIENTID [USER PASS]
import net from 'node:net';
import { MqttClient } from 'mqtt';

const [host, port, localAddress, version, clientId, username, password] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const fail = (what) => {
  out({ error: String(what) });
  process.exit(1);
};
setTimeout(() => fail('no CONNACK within 10 s'), 10000).unref();

// mqtt.js's own TCP stream takes no local address: a stream builder does.
const c = new MqttClient(() => net.createConnection({ host, port: Number(port), localAddress }), {
  clientId, username, password, protocolVersion: Number(version), clean: true, reconnectPeriod: 0,
});
c.on('connect', () => {
  out({ connack: 0, v: Number(version) });
  // In: it subscribes to the inbox, then ends (the test has failed).
  c.subscribe(`lmos/v1/clients/${clientId}/#`, { qos: 1 }, () => c.end(() => process.exit(0)));
});
c.on('error', (err) => {
  if (typeof err.code === 'number') {
    out({ connack: err.code, v: Number(version) });
    process.exit(0);
  }
  fail(err);
});
