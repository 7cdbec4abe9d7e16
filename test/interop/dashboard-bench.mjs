// dashboard-bench.mjs — the dashboard's figures in headless Chromium for
// test/e2e/dashboard_bench_test.go (make bench). One JSON object a line on
// stdout; {"error"} is a failure.
//
//   node dashboard-bench.mjs render HUB_URL CHROMIUM THINGS RUNS
//     RUNS cold visits of / (a new browser context each: empty cache), each
//     timed from the start of navigation to the first complete render of
//     the Things list: it counts THINGS of THINGS and shows its first page
//     of rows. Per run: {"run", "renderMs", "transfer", "encoded",
//     "decoded", "files", "all"} — the bytes of the dashboard's own files
//     (/ and /ui/…) the first render loaded, as sent (transfer: with
//     headers), as encoded (gzip) and as decoded; "all" the same once
//     every page (a Thing, join, groups, hub) was opened too.
//
//   node dashboard-bench.mjs watch HUB_URL CHROMIUM THING_ID PAGES
//     PAGES pages (a context each, as PAGES people would) on the Thing's
//     page with its event logs live; {"ready"} once every page shows an
//     event. On the stdin line "end": {"pages": [{heapStartMB, heapEndMB,
//     nodesStart, nodesEnd, listeners, entries}]} from Chromium's
//     Performance metrics, then it exits.
import { chromium } from "playwright-core";
import readline from "node:readline";

const [mode, base, exe, ...rest] = process.argv.slice(2);
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const fail = (what, e) => {
  say({ error: `${what}: ${e?.stack ?? e}` });
  process.exit(1);
};
if (!["render", "watch"].includes(mode) || !base || !exe) {
  console.error("usage: node dashboard-bench.mjs render|watch HUB_URL CHROMIUM …");
  process.exit(2);
}

const browser = await chromium
  .launch({ executablePath: exe, args: ["--no-sandbox", "--disable-dev-shm-usage"] })
  .catch((e) => fail("launch chromium", e));

async function render(things, runs) {
  for (let i = 0; i < runs; i++) {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await ctx.newPage();
    await page.goto(base + "/");
    // Polled every animation frame: the time is the frame that shows it.
    const renderMs = await page.waitForFunction(
      (n) => {
        const c = document.querySelector('[data-testid="things-count"]');
        const rows = document.querySelectorAll('[data-testid="thing-row"]').length;
        return c && c.textContent.startsWith(`${n} of ${n} Things`) && rows === Math.min(n, 50) ? performance.now() : false;
      },
      things,
      { polling: "raf", timeout: 60000 },
    ).then((h) => h.jsonValue());
    const first = await sizes(page);
    // Then every other page once (their modules load on first use): the
    // bytes of the whole dashboard.
    const id = await page.locator('[data-testid="thing-row"]').first().getAttribute("data-id");
    for (const hash of ["#/thing/" + encodeURIComponent(id), "#/join", "#/groups", "#/hub"]) {
      await page.evaluate((h) => { location.hash = h; }, hash);
      await page.waitForFunction((h) => location.hash === h && document.querySelector("main h1"), hash, { timeout: 60000 });
    }
    // Until no new file came for three looks 200 ms apart.
    let all = await sizes(page);
    for (let same = 0; same < 3; ) {
      await new Promise((r) => setTimeout(r, 200));
      const now = await sizes(page);
      same = now.files === all.files ? same + 1 : 0;
      all = now;
    }
    say({ run: i, renderMs, ...first, all });
    await ctx.close();
  }
}

// sizes sums the dashboard's own files the page loaded (/ and /ui/…).
function sizes(page) {
  return page.evaluate(() => {
    const own = (u) => {
      const p = new URL(u).pathname;
      return p === "/" || p.startsWith("/ui/");
    };
    const entries = [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")].filter((e) => own(e.name));
    const sum = (k) => entries.reduce((s, e) => s + (e[k] || 0), 0);
    return { transfer: sum("transferSize"), encoded: sum("encodedBodySize"), decoded: sum("decodedBodySize"), files: entries.length };
  });
}

async function metrics(page) {
  const s = await page.context().newCDPSession(page);
  await s.send("Performance.enable");
  const { metrics } = await s.send("Performance.getMetrics");
  await s.detach();
  const m = Object.fromEntries(metrics.map((x) => [x.name, x.value]));
  return { heapMB: m.JSHeapUsedSize / 1048576, nodes: m.Nodes, listeners: m.JSEventListeners };
}

async function watch(id, n) {
  const pages = [];
  for (let i = 0; i < n; i++) {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await ctx.newPage();
    page.on("pageerror", (e) => say({ error: `page ${i}: ${e.message}` }));
    await page.goto(base + "/#/thing/" + encodeURIComponent(id));
    pages.push(page);
  }
  for (const page of pages) {
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid^="event-log-"]')].some((l) => l.children.length > 0), null, {
      timeout: 60000,
    });
  }
  const start = [];
  for (const page of pages) start.push(await metrics(page));
  say({ ready: true });
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) if (line.trim() === "end") break;
  const out = [];
  for (const [i, page] of pages.entries()) {
    const end = await metrics(page);
    const entries = await page.evaluate(() =>
      [...document.querySelectorAll('[data-testid^="event-log-"]')].reduce((s, l) => s + l.children.length, 0),
    );
    out.push({
      heapStartMB: start[i].heapMB,
      heapEndMB: end.heapMB,
      nodesStart: start[i].nodes,
      nodesEnd: end.nodes,
      listeners: end.listeners,
      entries,
    });
  }
  say({ pages: out });
}

try {
  if (mode === "render") await render(Number(rest[0]), Number(rest[1]));
  else await watch(rest[0], Number(rest[1]));
} catch (e) {
  fail(mode, e);
}
await browser.close();
