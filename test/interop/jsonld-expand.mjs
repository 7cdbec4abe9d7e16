#!/usr/bin/env node
// jsonld-expand.mjs — expand Thing Descriptions with jsonld.js (npm jsonld,
// a JSON-LD 1.1 processor) and report how their LMOS terms expand, for
// test/e2e/jsonld_test.go.
//
//   node jsonld-expand.mjs URL...
//
// Each URL is fetched (a TD, or a JSON array of TDs such as GET /things) and
// every TD expanded; one JSON line per TD on stdout:
//   {"url", "id", "types": [expanded @type IRIs], "keys": [expanded top-level keys]}
// Remote @context documents are not fetched (the tests stay on loopback):
// the W3C TD and discovery contexts load as empty contexts, any other
// remote context is an error. The lmos term is defined inline by the hub's
// document, which is what is under test.
//
// Exit code: 0 done, 1 a fetch or an expansion failed, 2 usage.
import jsonld from "jsonld";

const W3C = new Set([
  "https://www.w3.org/2022/wot/td/v1.1",
  "https://www.w3.org/2019/wot/td/v1",
  "https://www.w3.org/2022/wot/discovery",
]);

const documentLoader = async (url) => {
  if (!W3C.has(url)) throw new Error(`remote context ${url} not allowed here`);
  return { contextUrl: null, documentUrl: url, document: { "@context": {} } };
};

const urls = process.argv.slice(2);
if (urls.length === 0) {
  process.stderr.write("usage: node jsonld-expand.mjs URL...\n");
  process.exit(2);
}
let failed = false;
for (const url of urls) {
  try {
    const res = await fetch(url, { headers: { Accept: "application/td+json, application/ld+json, application/json" } });
    if (!res.ok) throw new Error(`GET ${url}: ${res.status}`);
    const body = await res.json();
    for (const td of Array.isArray(body) ? body : [body]) {
      const [node] = await jsonld.expand(td, { documentLoader });
      process.stdout.write(JSON.stringify({ url, id: td.id, types: node?.["@type"] ?? [], keys: Object.keys(node ?? {}) }) + "\n");
    }
  } catch (e) {
    failed = true;
    process.stdout.write(JSON.stringify({ url, error: String(e?.stack ?? e) }) + "\n");
  }
}
process.exit(failed ? 1 : 0);
