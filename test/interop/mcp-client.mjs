// mcp-client.mjs — the official MCP TypeScript SDK client
// (@modelcontextprotocol/sdk) against lmos-hub's MCP door, /mcp.
//
//   node mcp-client.mjs http URL TOKEN
//       Streamable HTTP to URL (the hub's /mcp) with a bearer token.
//   node mcp-client.mjs stdio COMMAND HUB_URL TOKEN
//       stdio: runs `COMMAND mcp --hub HUB_URL` (the real lmos-hub binary)
//       with LMOS_HUB_TOKEN=TOKEN through the SDK's StdioClientTransport.
//
// Prints {"ready": {server, capabilities, protocolVersion}} once connected.
// Commands on stdin (JSON lines), run one after the other, each answered by
// its report (or {"failed": cmd} after the {"error"}) and then {"ok": cmd}:
//   {"cmd":"list"}                      → {"tools": [every tool, all pages]}
//   {"cmd":"call","name","arguments"}   → {"call": name, "result": the
//        CallToolResult, "progress": [every progress notification of the
//        call, as onprogress got them]}; with "expectError": true the call
//        must throw, reported as {"call": name, "thrown": {name, code,
//        message}} (anything else is an error)
//   {"cmd":"resources"}                 → {"resources": [all pages]}
//   {"cmd":"read","uri"}                → {"read": uri, "contents": […]}
//   {"cmd":"exit"}                      closes the client and exits 0.
// Events, whenever they happen:
//   {"progressed": n, "tool": name, "message"}  onprogress got the n-th
//                        progress notification of a call (the Go test's
//                        agent may wait for it before its next partial)
//   {"listChanged": n}   the n-th notifications/tools/list_changed
//   {"listening": n}     (http) the n-th time the transport's GET stream,
//                        where the hub sends list changes, was answered 200
//   {"notification": method, "params"}  any other notification
// Anything the SDK reports — a thrown McpError or StreamableHTTPError, an
// output-schema (ajv) failure of callTool, client.onerror,
// transport.onerror, an unhandled rejection, a line on the relay's stderr
// — is an {"error"} line: the Go test fails on each.
import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
let ending = false;
const complain = (what, err) => {
  if (ending) return; // streams the hub or the relay closes as the client leaves
  const e = err ?? {};
  const detail = [e.name, e.code !== undefined ? `code ${e.code}` : "", e.message ?? String(err)].filter(Boolean).join(" ");
  say({ error: `${what}: ${detail}` });
};
process.on("unhandledRejection", (e) => complain("unhandled rejection", e));
process.on("uncaughtException", (e) => complain("uncaught exception", e));

const [mode, ...args] = process.argv.slice(2);
let transport;
let listening = 0;
if (mode === "http" && args.length === 2) {
  const [url, token] = args;
  // The GET stream is where a session hears of list changes: the Go test
  // lets an agent join only once it is open, so the change cannot be lost.
  const watched = async (input, init) => {
    const res = await fetch(input, init);
    if ((init?.method ?? "GET") === "GET" && res.ok) say({ listening: ++listening });
    return res;
  };
  transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: watched,
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
} else if (mode === "stdio" && args.length === 3) {
  const [command, hub, token] = args;
  transport = new StdioClientTransport({
    command,
    args: ["mcp", "--hub", hub],
    env: { LMOS_HUB_TOKEN: token },
    stderr: "pipe",
  });
  // The relay writes to stderr only when something failed.
  readline.createInterface({ input: transport.stderr }).on("line", (l) => complain("lmos-hub mcp stderr", l));
} else {
  console.error("usage: node mcp-client.mjs http URL TOKEN | stdio COMMAND HUB_URL TOKEN");
  process.exit(2);
}
transport.onerror = (e) => complain("transport.onerror", e);

const client = new Client({ name: "lmos-hub-interop", version: "0" });
client.onerror = (e) => complain("client.onerror", e);
let changes = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => say({ listChanged: ++changes }));
client.fallbackNotificationHandler = async (n) => say({ notification: n.method, params: n.params ?? null });

try {
  await client.connect(transport);
} catch (e) {
  complain("connect", e);
  process.exit(1);
}
say({
  ready: {
    server: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    protocolVersion: transport.protocolVersion ?? null,
  },
});

// all reads every page of a list.
async function all(list, key) {
  const out = [];
  let cursor;
  for (let page = 0; page < 100; page++) {
    const res = await list(cursor === undefined ? undefined : { cursor });
    out.push(...res[key]);
    cursor = res.nextCursor;
    if (cursor === undefined) return out;
  }
  throw new Error(`more than 100 pages of ${key}`);
}

const handlers = {
  async list() {
    say({ tools: await all((p) => client.listTools(p), "tools") });
  },
  async call(c) {
    const progress = [];
    let result;
    try {
      result = await client.callTool({ name: c.name, arguments: c.arguments }, undefined, {
        onprogress: (p) => {
          progress.push(p);
          say({ progressed: progress.length, tool: c.name, message: p.message ?? null });
        },
      });
    } catch (e) {
      if (!c.expectError) throw e;
      return say({ call: c.name, thrown: { name: e.constructor?.name ?? null, code: e.code ?? null, message: e.message } });
    }
    if (c.expectError) throw new Error(`expected ${c.name} to throw, got ${JSON.stringify(result)}`);
    say({ call: c.name, result, progress });
  },
  async resources() {
    say({ resources: await all((p) => client.listResources(p), "resources") });
  },
  async read(c) {
    const res = await client.readResource({ uri: c.uri });
    say({ read: c.uri, contents: res.contents });
  },
  async exit() {
    ending = true;
    await client.close();
  },
};

const rl = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();
rl.on("line", (line) => {
  if (!line.trim()) return;
  chain = chain.then(async () => {
    let c;
    try {
      c = JSON.parse(line);
      const h = handlers[c.cmd];
      if (!h) throw new Error(`unknown command ${c.cmd}`);
      await h(c);
    } catch (e) {
      complain(`command ${line}`, e);
      say({ failed: c?.cmd ?? null }); // no report will come
    }
    say({ ok: c?.cmd ?? null });
    if (c?.cmd === "exit") process.exit(0);
  });
});
rl.on("close", () =>
  chain.then(async () => {
    ending = true;
    await client.close();
    process.exit(0);
  }),
);
