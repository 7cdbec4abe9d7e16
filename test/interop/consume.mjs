// consume.mjs — node-wot as an independent consumer of lmos-hub Things.
//
//   node consume.mjs TD_URL OPS_JSON [PROXY_JSON]
//
// Fetches the TD over HTTP (as a WoT Discovery client would), consumes it
// with node-wot (HTTP and MQTT bindings) and runs OPS_JSON, a list of
//   {"op": "readproperty"|"writeproperty"|"invokeaction"|"observeproperty"|"subscribeevent",
//    "name": "...", "input": ..., "count": n, "expect": v, "formIndex": i}
// readproperty with "expect" reads again (up to 5 s) until the value is v;
// observeproperty and subscribeevent print {"op": "subscribed"} once
// listening and collect "count" values.
// PROXY_JSON {"base": "http://hub/proxy/{id}", "token": "..."} puts HTTP
// forms of the hub's interaction proxy (§3.3) first for properties
// (read/write) and actions, with bearer security, so node-wot's HTTP
// binding reads, writes and invokes and its MQTT binding observes.
// Prints one JSON line per op: {"op", "name", "ok", "value"?, "values"?, "error"?}.
// Exit 0 when every op succeeded, 1 otherwise, 2 on usage errors.
import core from "@node-wot/core";
import bindingHttp from "@node-wot/binding-http";
import bindingMqtt from "@node-wot/binding-mqtt";

// node-wot 0.8 ships CommonJS modules.
const { Servient } = core;
const { HttpClientFactory } = bindingHttp;
const { MqttClientFactory } = bindingMqtt;

const [tdURL, opsJSON, proxyJSON] = process.argv.slice(2);
if (!tdURL || !opsJSON) {
  console.error("usage: node consume.mjs TD_URL OPS_JSON");
  process.exit(2);
}
const ops = JSON.parse(opsJSON);
const deadline = (ms, what) =>
  new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms));

const servient = new Servient();
servient.addClientFactory(new HttpClientFactory());
servient.addClientFactory(new MqttClientFactory());
let failed = false;
try {
  const WoT = await servient.start();
  const res = await fetch(tdURL);
  if (!res.ok) throw new Error(`GET ${tdURL}: ${res.status}`);
  const td = await res.json();
  if (proxyJSON) {
    const { base, token } = JSON.parse(proxyJSON);
    const json = { contentType: "application/json" };
    for (const [name, p] of Object.entries(td.properties ?? {})) {
      p.forms.unshift({ href: `${base}/properties/${name}`, op: ["readproperty", "writeproperty"], ...json });
    }
    for (const [name, a] of Object.entries(td.actions ?? {})) {
      a.forms.unshift({ href: `${base}/actions/${name}`, op: "invokeaction", ...json });
    }
    td.securityDefinitions = { ...td.securityDefinitions, bearer_sc: { scheme: "bearer", in: "header" } };
    td.security = ["bearer_sc"];
    servient.addCredentials({ [td.id]: { token } });
  }
  const thing = await WoT.consume(td);
  for (const o of ops) {
    const out = { op: o.op, name: o.name, ok: true };
    try {
      if (o.op === "readproperty") {
        const until = Date.now() + 5000;
        do {
          const v = await Promise.race([thing.readProperty(o.name), deadline(5000, o.name)]);
          out.value = await v.value();
        } while ("expect" in o && out.value !== o.expect && Date.now() < until);
      } else if (o.op === "writeproperty") {
        await Promise.race([thing.writeProperty(o.name, o.input), deadline(5000, o.name)]);
      } else if (o.op === "invokeaction") {
        const opts = "formIndex" in o ? { formIndex: o.formIndex } : undefined;
        const v = await Promise.race([thing.invokeAction(o.name, o.input, opts), deadline(5000, o.name)]);
        if (v && typeof v.value === "function") {
          try { out.value = await v.value(); } catch { /* fire-and-forget: no output */ }
        }
      } else if (o.op === "subscribeevent" || o.op === "observeproperty") {
        const opts = "formIndex" in o ? { formIndex: o.formIndex } : undefined;
        const want = o.count ?? 1;
        out.values = [];
        const listen = o.op === "subscribeevent" ? thing.subscribeEvent : thing.observeProperty;
        await Promise.race([
          new Promise((resolve, reject) => {
            listen.call(thing, o.name, async (data) => {
              out.values.push(await data.value());
              if (out.values.length >= want) resolve();
            }, reject, opts).then(() => console.log(JSON.stringify({ op: "subscribed", name: o.name })), reject);
          }),
          deadline(10000, o.name),
        ]);
      } else {
        throw new Error(`unknown op ${o.op}`);
      }
    } catch (e) {
      out.ok = false;
      out.error = String(e?.message ?? e);
      failed = true;
    }
    console.log(JSON.stringify(out));
  }
} catch (e) {
  console.log(JSON.stringify({ op: "setup", ok: false, error: String(e?.message ?? e) }));
  failed = true;
}
await servient.shutdown().catch(() => {});
process.exit(failed ? 1 : 0);
