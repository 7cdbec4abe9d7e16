// dashboard-browser.mjs — drives the hub's dashboard in headless Chromium
// (npm playwright-core talking to Debian's /usr/bin/chromium) for
// test/e2e/dashboard_browser_test.go.
//
//   node dashboard-browser.mjs HUB_URL ADMIN_TOKEN SCREENSHOT_DIR [CHROMIUM]
//
// It opens HUB_URL/ once and keeps that page for the whole session, as a
// person would: live updates must reach it without a reload. Every element
// it touches is found by the data-testid hooks of the dashboard's DOM
// contract. Commands come on stdin, one JSON object a line ({"cmd": …});
// for each it prints, one JSON object a line:
//   {"check": name, "pass": bool, "detail": text}   one or more verdicts
//   {"pageError": text}   a console error, an uncaught exception, a failed
//                         request or an HTTP error answer seen meanwhile
//   {"info": text}        what a person would have seen (dialogs, tokens)
//   other reports the command names (e.g. {"token": {...}})
//   {"done": cmd}         the command is over
// A check never ends the session: one that fails leaves the page to the
// next (which starts by dismissing what is left open). {"error"} lines
// are the harness's own failures.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";

const [base, adminToken, shots, exe = "/usr/bin/chromium"] = process.argv.slice(2);
if (!base || !adminToken || !shots) {
  console.error("usage: node dashboard-browser.mjs HUB_URL ADMIN_TOKEN SCREENSHOT_DIR [CHROMIUM]");
  process.exit(2);
}
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const fail = (what, e) => {
  say({ error: `${what}: ${e?.stack ?? e}` });
  process.exit(1);
};

// How long one step may take: generous, for a loaded 2-core machine. A
// passing step is over in milliseconds; only a failing one waits this out
// (LMOS_BROWSER_STEP_MS shortens it to try the harness on a page that
// lacks most hooks).
const STEP = Number(process.env.LMOS_BROWSER_STEP_MS) || 15000;
const WIDE = { width: 1280, height: 900 };
const PHONE = { width: 360, height: 740 };

const T = (id) => `[data-testid="${cssq(id)}"]`;
// cssq quotes a value for a CSS attribute selector in double quotes.
const cssq = (s) => String(s).replace(/["\\]/g, (c) => "\\" + c).replace(/\n/g, "\\a ");
const row = (id) => `${T("thing-row")}[data-id="${cssq(id)}"]`;

let crashed = false;
// expectStatus holds the HTTP error answers the running check provokes.
let expectStatus = new Set();
// outage: the hub is being restarted; the page's requests that cannot
// reach it then are expected.
let outage = false;
const browser = await chromium.launch({
  executablePath: exe,
  // Root (CI) cannot use Chromium's sandbox; the page is the hub's own.
  // LMOS_BROWSER_SPKI: the hub's self-signed certificate is trusted by
  // its key alone (base64 SHA-256 of the SubjectPublicKeyInfo).
  args: ["--no-sandbox", "--disable-dev-shm-usage",
    ...(process.env.LMOS_BROWSER_SPKI ? [`--ignore-certificate-errors-spki-list=${process.env.LMOS_BROWSER_SPKI}`] : [])],
}).catch((e) => fail("launch chromium", e));
const context = await browser.newContext({ viewport: WIDE });
let page;
let recording = true;

// watch reports everything the page does wrong as {"pageError"}.
function watch(p) {
  p.on("console", (m) => {
    if (!recording || m.type() !== "error") return;
    // Chromium logs every HTTP error answer as a console error too; the
    // response handler below judges those, with method and URL.
    if (/^Failed to load resource: the server responded with a status of \d+/.test(m.text())) return;
    if (outage) {
      say({ info: `while the hub restarts: console error: ${m.text()}` });
      return;
    }
    const url = m.location()?.url ?? "";
    say({ pageError: `console error: ${m.text()}${url ? ` (${url})` : ""}` });
  });
  p.on("request", (r) => {
    // The token is held for the session, never put in a URL (logs,
    // history and Referer keep those).
    if (recording && r.url().includes(adminToken)) say({ pageError: `the token in a URL: ${r.method()} ${r.url().replace(adminToken, "<token>")}` });
  });
  p.on("crash", () => {
    crashed = true;
    say({ pageError: "the page crashed" });
  });
  p.on("pageerror", (e) => recording && say({ pageError: `uncaught exception: ${e.message}` }));
  p.on("requestfailed", (r) => {
    if (!recording) return;
    const why = r.failure()?.errorText ?? "";
    // The page cancelling its own request (a live view it left) is no
    // failure; a refused, reset or empty answer is.
    if (outage) {
      say({ info: `while the hub restarts: ${r.method()} ${r.url()}: ${why}` });
      return;
    }
    if (why === "net::ERR_ABORTED") {
      say({ info: `cancelled by the page: ${r.method()} ${r.url()}` });
      return;
    }
    say({ pageError: `request failed: ${r.method()} ${r.url()}: ${why}` });
  });
  p.on("response", async (r) => {
    if (!recording || r.status() < 400) return;
    const req = r.request();
    const hdrs = await req.allHeaders().catch(() => ({}));
    // A 401 to a request sent without a token is the dashboard finding
    // out it needs one (it then asks); with a token it is a failure.
    if (expectStatus.has(r.status()) || (outage && r.status() >= 500)) {
      say({ info: `HTTP ${r.status()} as the check expects: ${req.method()} ${r.url()}` });
      return;
    }
    if (r.status() === 401 && !hdrs.authorization) {
      say({ info: `401 without a token: ${req.method()} ${r.url()}` });
      return;
    }
    say({ pageError: `HTTP ${r.status()} for ${req.method()} ${r.url()}` });
  });
  p.on("dialog", async (d) => {
    say({ info: `${d.type()} dialog accepted: ${d.message()}` });
    await d.accept().catch(() => {});
  });
}

async function openPage(ctx = context) {
  page = await ctx.newPage();
  // No single call waits long: until() repeats it within STEP.
  page.setDefaultTimeout(2000);
  watch(page);
  // A loaded machine may take long to load the page: four steps' time.
  await page.goto(base + "/", { waitUntil: "load", timeout: 4 * STEP });
  // A mark only this page load carries: a reload or a navigation away
  // loses it, so a live update seen with the mark still there came
  // without one.
  await page.evaluate(() => {
    window.__harnessLoad = "loaded-once";
  });
}

async function noReload() {
  const mark = await page.evaluate(() => window.__harnessLoad);
  if (mark !== "loaded-once") throw new Error("the page was reloaded or navigated away");
}

let tokenGiven = 0;
// answerWith is the token the prompt gets: the admin token, except in a
// visit that tries a refused one (refusedToken).
let answerWith = adminToken;
// answerTokenDialog types the admin token into the dashboard's token
// prompt when it is open.
async function answerTokenDialog() {
  const dlg = page.locator(T("token-dialog"));
  if (!(await dlg.isVisible().catch(() => false))) return;
  await page.locator(T("token-input")).fill(answerWith, { timeout: 2000 });
  await page.locator(T("token-save")).click({ timeout: 2000 });
  if (answerWith !== adminToken) {
    say({ info: "token dialog answered with the token to refuse" });
    return;
  }
  tokenGiven++;
  say({ info: "token dialog answered with the admin token" });
}

// until polls fn (answering the token prompt between tries) until it
// returns a truthy value, and fails with what and the last reason after
// STEP.
async function until(what, fn, ms = STEP) {
  const end = Date.now() + ms;
  let last = "";
  for (;;) {
    try {
      await answerTokenDialog();
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e.message.split("\n")[0];
    }
    if (Date.now() > end) throw new Error(`${what}: not within ${ms / 1000} s${last ? ` (last: ${last})` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const visible = (sel) => page.locator(sel).first().isVisible();
const text = async (sel) => (await page.locator(sel).first().textContent({ timeout: 1000 })) ?? "";

async function click(sel, what = sel) {
  await until(`click ${what}`, async () => {
    const l = page.locator(sel).first();
    if (!(await l.isVisible())) throw new Error(`${what} not visible`);
    await l.click({ timeout: 2000 });
    return true;
  });
}

async function fill(sel, value, what = sel) {
  await until(`fill ${what}`, async () => {
    const l = page.locator(sel).first();
    if (!(await l.isVisible())) throw new Error(`${what} not visible`);
    await setField(l, value);
    return true;
  });
}

// setField sets an input, select or checkbox as a person would.
async function setField(l, value) {
  const kind = await l.evaluate((e) => (e.tagName === "SELECT" ? "select" : e.type === "checkbox" ? "checkbox" : "text"));
  if (kind === "select") await l.selectOption(String(value), { timeout: 2000 });
  else if (kind === "checkbox") await l.setChecked(Boolean(value), { timeout: 2000 });
  else await l.fill(String(value), { timeout: 2000 });
}

const nav = (name) => click(T(`nav-${name}`), `nav-${name}`);

// reset leaves the page as a check expects to find it: no dialog open
// (Escape closes a modal), the wide viewport, the Things list.
async function reset() {
  if (crashed) {
    // The checks after a crash get a page of their own (which asks for
    // the token anew).
    crashed = false;
    await page.close().catch(() => {});
    await openPage();
  }
  for (let i = 0; i < 3 && (await page.locator("dialog[open]").count().catch(() => 0)); i++) {
    await page.keyboard.press("Escape");
  }
  await page.setViewportSize(WIDE);
  await nav("things");
  if (await visible(T("search")).catch(() => false)) await page.locator(T("search")).fill("");
}

async function openThing(id) {
  await reset();
  await click(`${row(id)} ${T("thing-link")}`, `thing-link of ${id}`);
  await until(`the page of ${id}`, () => visible(T("thing-title")));
}

let shot = 0;
async function screenshot(name, fullPage = true) {
  const file = path.join(shots, `${String(++shot).padStart(2, "0")}-${name.replace(/[^a-z0-9-]+/gi, "_")}.png`);
  await page.screenshot({ path: file, fullPage }).catch((e) => say({ info: `screenshot ${file}: ${e.message}` }));
  return file;
}

// check runs one verdict: any exception is its failure, never the
// session's.
async function check(name, fn) {
  try {
    const detail = await fn();
    say({ check: name, pass: true, detail: detail ?? "" });
  } catch (e) {
    say({ check: name, pass: false, detail: e.message });
  }
  await screenshot(name);
}

const unseen = (t, words) => words.filter((w) => !t.includes(w));

const handlers = {
  // list: every id has a row, online where want says so.
  async list(c) {
    if (c.first) {
      await check("reading asks for no token", async () => {
        await reset();
        for (const id of c.ids) await until(`row of ${id}`, () => visible(row(id)));
        if (tokenGiven) throw new Error("the token was asked for before any change");
      });
    }
    await check("list shows the agents", async () => {
      await reset();
      for (const id of c.ids) {
        await until(`row of ${id}`, () => visible(row(id)));
      }
      for (const id of c.online ?? []) {
        await until(`${id} online`, async () => (await page.locator(row(id)).getAttribute("data-presence")) === "online");
      }
      return `${c.ids.length} rows`;
    });
  },

  // watch: the list is on screen and shows ids; nothing navigates until
  // appear/gone.
  async watch(c) {
    await check("list open before the agent starts", async () => {
      await reset();
      for (const id of c.ids) await until(`row of ${id}`, () => visible(row(id)));
      if (await page.locator(row(c.absent)).count()) throw new Error(`${c.absent} listed before it started`);
    });
  },

  async appear(c) {
    await check("new agent appears without reload", async () => {
      await until(`row of ${c.id}`, () => visible(row(c.id)));
      await until(`${c.id} online`, async () => (await page.locator(row(c.id)).getAttribute("data-presence")) === "online");
      await noReload();
    });
  },

  async gone(c) {
    await check("stopped agent turns offline without reload", async () => {
      await until(
        `${c.id} offline`,
        async () => (await page.locator(row(c.id)).getAttribute("data-presence")) === "offline",
      );
      await noReload();
    });
    await check("offline row is greyed", async () => {
      // Its look differs from an online row's: the row's or its cells'
      // colour, opacity or filter.
      const look = (sel) =>
        page.locator(sel).first().evaluate((e) =>
          [e, ...e.children].map((x) => {
            const s = getComputedStyle(x);
            return [s.color, s.opacity, s.filter, s.backgroundColor].join(" ");
          }).join("|"),
        );
      const off = await look(row(c.id));
      const on = await look(row(c.online));
      if (off === on) throw new Error(`the offline row looks like the online ${c.online}: ${off}`);
    });
  },

  async search(c) {
    await check("search finds an agent by capability", async () => {
      await reset();
      await fill(T("search"), c.q, "search");
      await until(`only ${c.want} listed for "${c.q}"`, async () => {
        if (!(await visible(row(c.want)))) throw new Error(`${c.want} not listed`);
        for (const other of c.not) {
          if (await visible(row(other))) throw new Error(`${other} still listed`);
        }
        return true;
      });
    });
    await check("search highlights the matched term", async () => {
      const marked = await page.locator(`${row(c.want)} mark`).allTextContents();
      if (!marked.some((m) => m.toLowerCase().includes(c.mark.toLowerCase()))) {
        throw new Error(`no <mark>${c.mark}</mark> in the row of ${c.want} (marks: ${JSON.stringify(marked)})`);
      }
      return `marks ${JSON.stringify(marked)}`;
    });
  },

  // invoke fills the action's generated form and waits for the result.
  async invoke(c) {
    await check(`action ${c.action} through its form`, async () => {
      await openThing(c.id);
      await fillForm(c.action, c.fields);
      await click(T(`action-submit-${c.action}`));
      const t = await until(`result of ${c.action} showing ${c.want}`, async () => {
        const t = await text(T(`action-result-${c.action}`));
        const miss = unseen(t, c.want);
        if (miss.length) throw new Error(`result ${JSON.stringify(t.slice(0, 300))} lacks ${miss}`);
        return t;
      });
      return t.slice(0, 200);
    });
  },

  // invalid: input that breaks the action's schema is flagged at its
  // field and never sent.
  async invalid(c) {
    await check(`invalid input of ${c.action} flagged before sending`, async () => {
      await openThing(c.id);
      let sent = 0;
      const count = (r) => {
        if (r.method() === "POST" && r.url().includes(`/actions/${encodeURIComponent(c.action)}`)) sent++;
      };
      page.on("request", count);
      try {
        await fillForm(c.action, c.fields);
        await click(T(`action-submit-${c.action}`));
        const form = T(`action-form-${c.action}`);
        const t = await until("a field error", async () => {
          const errs = await page.locator(`${form} ${T("field-error")}`).allTextContents();
          return errs.map((e) => e.trim()).filter(Boolean).join("; ");
        });
        if (sent) throw new Error(`the invalid input was sent (${sent} request(s))`);
        return t.slice(0, 200);
      } finally {
        page.off("request", count);
      }
    });
    // Sent anyway (the form's "without checks" box): the hub refuses it
    // with 400 and its validationErrors, shown at the field they name.
    await check(`invalid input of ${c.action} sent unchecked is refused by the hub at the field`, async () => {
      const answers = [];
      const seen = (r) => {
        if (r.request().method() === "POST" && r.url().includes(`/actions/${encodeURIComponent(c.action)}`)) answers.push(r);
      };
      page.on("response", seen);
      expectStatus = new Set([400]);
      try {
        await fill(T(`action-unchecked-${c.action}`), true);
        await click(T(`action-submit-${c.action}`));
        const r = await until("the hub's answer", async () => answers[0]);
        const body = await r.json().catch(() => ({}));
        if (r.status() !== 400 || !Array.isArray(body.validationErrors) || !body.validationErrors.length) {
          throw new Error(`the hub answered ${r.status()} ${JSON.stringify(body).slice(0, 300)}`);
        }
        const field = Object.keys(c.fields)[0];
        const at = `${T(`action-form-${c.action}`)} .form-field:has([name="${cssq(field)}"]) ${T("field-error")}`;
        const shown = await until(`the hub's error at ${field}`, async () => (await text(at)).trim());
        const want = body.validationErrors.map((e) => e.description).filter(Boolean);
        if (!want.some((d) => shown.includes(d))) throw new Error(`${field} shows ${JSON.stringify(shown)}, the hub said ${JSON.stringify(want)}`);
        await fill(T(`action-unchecked-${c.action}`), false);
        return `${r.status()}, at ${field}: ${shown.slice(0, 150)}`;
      } finally {
        page.off("response", seen);
        expectStatus = new Set();
      }
    });
  },

  // streamStart submits a streamed action whose agent holds back its last
  // results: the first partial results must show while no final result
  // exists yet.
  async streamStart(c) {
    await check("streamed action shows partial results before the final one", async () => {
      await openThing(c.id);
      await fillForm(c.action, c.fields);
      await click(T(`action-submit-${c.action}`));
      await until(`partial results ${c.want}`, async () => {
        const t = await text(T(`action-partials-${c.action}`));
        const miss = unseen(t, c.want);
        if (miss.length) throw new Error(`partials ${JSON.stringify(t.slice(0, 300))} lack ${miss}`);
        return true;
      });
      const final = await page.locator(T(`action-result-${c.action}`)).first();
      const ft = (await final.count()) ? ((await final.textContent()) ?? "") : "";
      if (c.finalMark && ft.includes(c.finalMark)) throw new Error("the final result is shown before the agent sent it");
    });
  },

  async streamEnd(c) {
    await check("streamed action ends with its final result", async () => {
      await until(`final result ${c.want}`, async () => {
        const t = await text(T(`action-result-${c.action}`));
        const miss = unseen(t, c.want);
        if (miss.length) throw new Error(`result ${JSON.stringify(t.slice(0, 300))} lacks ${miss}`);
        return true;
      });
      const t = await text(T(`action-partials-${c.action}`));
      const miss = unseen(t, c.partials);
      if (miss.length) throw new Error(`partials ${JSON.stringify(t.slice(0, 300))} lack ${miss}`);
    });
  },

  async openThing(c) {
    await check(`page of ${c.id} open`, async () => {
      await openThing(c.id);
      // An empty log or value may have no size yet: present is enough.
      for (const sel of c.wait ?? []) await until(`${sel} present`, async () => (await page.locator(T(sel)).count()) > 0);
    });
  },

  // openHash opens a Thing's page by its address (#/thing/ID), as a link
  // or a typed URL does: with 1,000 Things its row may be on another page.
  async openHash(c) {
    await check(`page of ${c.id} open by its address`, async () => {
      await reset();
      await page.evaluate((id) => { location.hash = "#/thing/" + encodeURIComponent(id); }, c.id);
      await until(`the page of ${c.id}`, () => visible(T("thing-title")));
      for (const sel of c.wait ?? []) await until(`${sel} present`, async () => (await page.locator(T(sel)).count()) > 0);
      await noReload();
    });
  },

  // many: Things registered while the list was open are all counted, the
  // list is paged (50 rows a page), and search finds one of them.
  async many(c) {
    await check(`${c.total} Things listed, paged, without reload`, async () => {
      const info = await until(`the list counting ${c.total}`, async () => {
        const t = await text(T("things-count"));
        if (!t.startsWith(`${c.total} of ${c.total} Things`)) throw new Error(`it says ${JSON.stringify(t)}`);
        return t;
      });
      const rows = await page.locator(T("thing-row")).count();
      if (rows !== 50) throw new Error(`${rows} rows on the page, want 50`);
      const pager = await text(".pager");
      if (!pager.includes(`of ${Math.ceil(c.total / 50)}`)) throw new Error(`pager says ${JSON.stringify(pager)}`);
      await noReload();
      return `${info}; ${pager.trim()}`;
    });
    await check("search finds one Thing of 1,000", async () => {
      await fill(T("search"), c.q);
      await until(`row of ${c.sample}`, () => visible(row(c.sample)));
      await fill(T("search"), "");
      await until("the whole list back", async () => (await text(T("things-count"))).startsWith(`${c.total} of`));
      return `${await page.locator(T("thing-row")).count()} rows after clearing`;
    });
  },

  // bigTD: a Thing with a 256 KiB TD shows its page, its last property
  // and the raw TD.
  async bigTD(c) {
    await check(`a ${Math.round(c.bytes / 1024)} KiB TD renders`, async () => {
      await reset();
      await page.evaluate((id) => { location.hash = "#/thing/" + encodeURIComponent(id); }, c.id);
      await until(`the title ${c.title}`, async () => (await text(T("thing-title"))).trim() === c.title);
      await until(`property ${c.last}`, async () => (await page.locator(T(`prop-${c.last}`)).count()) > 0);
      const raw = await until("the raw TD", () => page.locator(T("td-raw")).evaluate((e) => e.textContent.length));
      if (raw < c.bytes) throw new Error(`the raw TD shows ${raw} characters, the TD has ${c.bytes} bytes`);
      const props = await page.locator('[data-testid^="prop-value-"]').count();
      await noReload();
      return `${props} properties, raw TD ${raw} characters`;
    });
  },

  // floodStart notes the longest task the page runs from now on (for the
  // report, not a verdict: speed is measured by make bench).
  async floodStart() {
    await page.evaluate(() => {
      window.__longest = 0;
      window.__longObs?.disconnect();
      window.__longObs = new PerformanceObserver((l) => {
        for (const e of l.getEntries()) window.__longest = Math.max(window.__longest, e.duration);
      });
      window.__longObs.observe({ type: "longtask" });
    });
  },

  // floodEnd: after 5,000 events at 1,000 a second the log shows the
  // last one and holds no more entries than its bound.
  async floodEnd(c) {
    await check("1,000 events a second: the log shows the last and stays bounded", async () => {
      await until(`${c.testid} showing ${c.last}`, async () => (await text(T(c.testid))).includes(c.last));
      const items = await page.locator(`${T(c.testid)} li`).count();
      if (items > c.max) throw new Error(`${items} entries in the log, the bound is ${c.max}`);
      const longest = await page.evaluate(() => window.__longest);
      await noReload();
      return `${items} entries kept; the longest task while it ran: ${Math.round(longest)} ms`;
    });
  },

  // seeText waits for text in an element of the page as it is (no
  // navigation): a live event, a property's new value.
  async seeText(c) {
    await check(c.name, async () => {
      const t = await until(`${c.testid} showing ${c.text}`, async () => {
        const t = await text(T(c.testid));
        if (!t.includes(c.text)) throw new Error(`${c.testid} is ${JSON.stringify(t.slice(0, 200))}`);
        return t;
      });
      await noReload();
      return t.slice(0, 200);
    });
  },

  async approve(c) {
    await check("approving a pending agent", async () => {
      await reset();
      await nav("join");
      const r = `${T("pending-row")}[data-id="${cssq(c.id)}"]`;
      await until(`pending row of ${c.id}`, () => visible(r));
      await click(`${r} ${T("approve")}`, "approve");
      await until(`pending row of ${c.id} gone`, async () => !(await page.locator(r).count()));
    });
  },

  async permit() {
    await check("permit join shows a countdown", async () => {
      await reset();
      await nav("join");
      await click(T("permit-join"), "permit-join");
      const t = await until("a countdown", async () => {
        const t = await text(T("permit-countdown"));
        const n = Number((t.match(/\d+/) ?? [])[0]);
        if (!(n > 0)) throw new Error(`permit-countdown is ${JSON.stringify(t)}`);
        return t;
      });
      return t.trim();
    });
  },

  async group(c) {
    await check("group created, members added, group action run", async () => {
      await reset();
      await nav("groups");
      await fill(T("group-create-id"), c.gid, "group-create-id");
      await click(T("group-create"), "group-create");
      // Creating may open the new group's page, or list it: then its row
      // leads there.
      const gr = `${T("group-row")}[data-id="${cssq(c.gid)}"]`;
      const where = await until(`group ${c.gid} listed or opened`, async () =>
        (await visible(T("member-add-id"))) ? "page" : (await visible(gr)) ? "row" : "",
      );
      if (where === "row") {
        const link = page.locator(`${gr} a`).first();
        if (await link.count()) await link.click();
        else await page.locator(gr).first().click();
      }
      for (const m of c.members) {
        await fill(T("member-add-id"), m, "member-add-id");
        await click(T("member-add"), "member-add");
        await until(`member row ${m}`, () => visible(`${T("member-row")}[data-id="${cssq(m)}"]`));
      }
      await fill(T("group-action-name"), c.action, "group-action-name");
      await click(T("group-action-submit"), "group-action-submit");
      const rows = T("group-action-result-row");
      await until(`${c.members.length} result rows`, async () => (await page.locator(rows).count()) === c.members.length);
      const seen = [];
      for (const m of c.members) {
        const t = await text(`${rows}[data-id="${cssq(m)}"]`);
        if (!t.includes(c.want[m])) throw new Error(`result row of ${m} is ${JSON.stringify(t.slice(0, 200))}, want ${c.want[m]}`);
        seen.push(m);
      }
      return `one result each for ${seen.join(", ")}`;
    });
    await check("a member's page links its group", async () => {
      await openThing(c.members[0]);
      await until(`a link named ${c.gid}`, async () => {
        const names = await page.locator("a").allTextContents();
        if (!names.some((n) => n.trim() === c.gid)) throw new Error(`no link named ${c.gid}`);
        return true;
      });
    });
  },

  async tokenCreate(c) {
    await check("token created", async () => {
      await reset();
      await nav("hub");
      await until("token form", () => visible(T("token-create")));
      // The tokens the hub had: once listed, a new row is the new token.
      for (const id of c.existing ?? []) {
        await until(`token row ${id}`, async () => (await page.locator(`${T("token-row")}[data-id="${cssq(id)}"]`).count()) > 0);
      }
      const before = new Set(await page.locator(T("token-row")).evaluateAll((rs) => rs.map((r) => r.dataset.id)));
      if (await visible(T("token-create-scope"))) await setField(page.locator(T("token-create-scope")).first(), c.scope);
      await click(T("token-create"), "token-create");
      const value = await until("the new token's value", async () => (await text(T("token-value"))).trim());
      const id = await until("the new token's row", async () => {
        const now = await page.locator(T("token-row")).evaluateAll((rs) => rs.map((r) => r.dataset.id));
        return now.find((x) => !before.has(x));
      });
      say({ token: { id, value } });
      return `token ${id}`;
    });
  },

  // federation: the hub page pairs another hub by its URL and DID (the
  // form an admin fills in), its row and link turn connected, the other
  // hub's Thing is listed with its home hub, and unpairing takes the row
  // and the Thing away again.
  async federation(c) {
    const peer = `${T("peer-row")}[data-did="${cssq(c.did)}"]`;
    await check("a hub paired from the hub page turns connected", async () => {
      await reset();
      await nav("hub");
      await until("the pairing form", () => visible(T("peer-add")));
      await fill(T("peer-url"), c.url, "peer-url");
      await fill(T("peer-did"), c.did, "peer-did");
      await click(T("peer-add"), "peer-add");
      await until("the peer's row connected", async () => {
        const t = (await text(`${peer} ${T("peer-state")}`)).trim();
        if (t !== "connected") throw new Error(`peer-state is ${JSON.stringify(t)}`);
        return t;
      });
      const link = `${T("link-row")}[data-kind="peer"][data-name="${cssq(c.did)}"]`;
      return await until("its link in the links table", async () => {
        const t = (await text(`${link} ${T("link-state")}`)).trim();
        if (t !== "connected") throw new Error(`link-state is ${JSON.stringify(t)}`);
        return `peer ${c.url}: ${t}`;
      });
    });
    await check("the other hub's Thing is listed with its home hub", async () => {
      await reset();
      return await until(`${c.thing} listed as remote`, async () => {
        const t = (await text(`${row(c.thing)} ${T("thing-origin")}`)).trim();
        if (t !== c.origin) throw new Error(`its origin reads ${JSON.stringify(t)}, want ${JSON.stringify(c.origin)}`);
        return t;
      });
    });
    await check("unpairing removes the peer and its Things", async () => {
      await reset();
      await nav("hub");
      await until("the peer's row", () => visible(peer));
      await click(`${peer} ${T("peer-remove")}`, "peer-remove");
      await until("the peer's row gone", async () => !(await page.locator(peer).count()));
      await reset();
      await until(`${c.thing} gone from the list`, async () => !(await page.locator(row(c.thing)).count()));
      return "unpaired";
    });
  },

  // hubFigures: the hub page shows the mDNS state, the MCP endpoint and, while messages
  // flow, a messages/s figure above zero (a rate needs two reads of
  // /metrics, 5 s apart).
  async hubFigures(c) {
    await check("hub page shows the mDNS state", async () => {
      await reset();
      await nav("hub");
      return await until(`hub-mdns showing ${c.mdns}`, async () => {
        const t = (await text(T("hub-mdns"))).trim();
        if (!t.startsWith(c.mdns)) throw new Error(`hub-mdns is ${JSON.stringify(t)}`);
        return t;
      });
    });
    await check("hub page shows the MCP endpoint for LLM clients", async () => {
      const want = new URL("/mcp", page.url()).href;
      return await until(`hub-mcp showing ${want}`, async () => {
        const t = (await text(T("hub-mcp"))).trim();
        if (!t.startsWith(want)) throw new Error(`hub-mcp is ${JSON.stringify(t)}`);
        return t;
      });
    });
    await check("hub page shows messages/s while messages flow", async () => {
      return await until("broker-messages-rate above 0", async () => {
        const t = (await text(T("broker-messages-rate"))).trim();
        if (!(Number(t) > 0)) throw new Error(`broker-messages-rate is ${JSON.stringify(t)}`);
        return `${t} messages/s, ${(await text(T("broker-deliveries-rate"))).trim()} deliveries/s`;
      });
    });
  },

  // backup: the hub page's "Download backup" saves the store's snapshot
  // (POST /api/backup with the page's admin token) as a file, to c.path.
  async backup(c) {
    await check("backup downloaded", async () => {
      await reset();
      await nav("hub");
      await until("backup button", () => visible(T("backup-download")));
      const saved = page.waitForEvent("download", { timeout: STEP });
      await click(T("backup-download"), "backup-download");
      const dl = await saved;
      await dl.saveAs(c.path);
      const info = await until("the backup's note", async () => {
        const t = (await text(T("backup-info"))).trim();
        if (!t.startsWith("Saved")) throw new Error(`backup-info is ${JSON.stringify(t)}`);
        return t;
      });
      return `${dl.suggestedFilename()}: ${info}`;
    });
  },

  async tokenRevoke(c) {
    await check("token revoked", async () => {
      await reset();
      await nav("hub");
      const r = `${T("token-row")}[data-id="${cssq(c.id)}"]`;
      await until(`token row ${c.id}`, () => visible(r));
      await click(`${r} ${T("token-revoke")}`, "token-revoke");
      await until(`token row ${c.id} gone or marked revoked`, async () => {
        if (!(await page.locator(r).count())) return true;
        return /revoked/i.test(await text(r));
      });
    });
  },

  // hostile: a TD whose text is HTML and script shows that text and runs
  // none of it.
  async hostile(c) {
    const inert = async () => {
      const s = await page.evaluate(() => ({
        pwned: window.__pwned,
        handlers: [...document.querySelectorAll("*")].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length,
        jsLinks: [...document.querySelectorAll("[href],[src],[action]")]
          .map((e) => e.getAttribute("href") ?? e.getAttribute("src") ?? e.getAttribute("action"))
          .filter((v) => /^\s*javascript:/i.test(v)).length,
        injected: document.querySelectorAll("img[src='x'], iframe, object, embed, svg script").length,
      }));
      if (s.pwned !== undefined) throw new Error(`window.__pwned = ${s.pwned}: the TD's script ran`);
      if (s.handlers || s.jsLinks || s.injected) throw new Error(`the TD's markup became elements: ${JSON.stringify(s)}`);
    };
    await check("hostile TD shown as text in the list", async () => {
      await reset();
      await until(`row of ${c.id}`, () => visible(row(c.id)));
      const t = await text(row(c.id));
      if (!t.includes(c.listText)) throw new Error(`row text ${JSON.stringify(t.slice(0, 300))} lacks ${c.listText}`);
      await inert();
    });
    await check("hostile TD shown as text on its page", async () => {
      await openThing(c.id);
      const title = await text(T("thing-title"));
      if (title.trim() !== c.title) throw new Error(`thing-title is ${JSON.stringify(title)}, want ${JSON.stringify(c.title)}`);
      const body = await page.locator("body").innerText();
      const miss = unseen(body, c.texts);
      if (miss.length) throw new Error(`the page does not show ${JSON.stringify(miss)} as text`);
      await until(`prop-${c.prop}`, () => visible(T(`prop-${c.prop}`)));
      const opts = await page.locator(`${T(`action-form-${c.action}`)} option`).allTextContents();
      if (!opts.some((o) => o.includes(c.enumValue))) throw new Error(`no option ${JSON.stringify(c.enumValue)} in ${JSON.stringify(opts)}`);
      const raw = await page.locator(T("td-raw")).first().textContent({ timeout: 2000 });
      if (!raw?.includes(c.rawText)) throw new Error("td-raw does not hold the TD's text");
      await inert();
    });
  },

  // phone: at 360 px no page scrolls sideways.
  async phone(c) {
    const fits = async (where) => {
      const w = await page.evaluate(() => document.scrollingElement.scrollWidth);
      if (w > PHONE.width) throw new Error(`${where}: scrollWidth ${w} > ${PHONE.width}`);
      return `${where} ${w}px`;
    };
    for (const [name, go] of [
      ["things", () => nav("things")],
      ["thing page", () => click(`${row(c.id)} ${T("thing-link")}`, `thing-link of ${c.id}`).then(() => until("thing-title", () => visible(T("thing-title"))))],
      ["join", () => nav("join")],
      ["groups", () => nav("groups")],
      ["hub", () => nav("hub")],
    ]) {
      await check(`360 px: ${name} without horizontal scroll`, async () => {
        await reset();
        await page.setViewportSize(PHONE);
        if (name === "thing page") await nav("things");
        await go();
        return fits(name);
      });
    }
    await page.setViewportSize(WIDE);
  },

  // a11y: on every page, each control has an accessible name, text meets
  // WCAG AA contrast (4.5:1; 3:1 for large text) against what it is drawn
  // on, and the keyboard alone reaches the navigation and opens a Thing.
  async a11y(c) {
    const audit = () =>
      page.evaluate(() => {
        const shown = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
        const nameOf = (e) => {
          if (e.getAttribute("aria-label")) return e.getAttribute("aria-label");
          const by = e.getAttribute("aria-labelledby");
          if (by) return by.split(/\s+/).map((id) => document.getElementById(id)?.textContent ?? "").join(" ");
          if (e.labels && e.labels.length) return [...e.labels].map((l) => l.textContent).join(" ");
          if (e.tagName === "BUTTON" || e.tagName === "A" || e.tagName === "SUMMARY") return e.textContent || e.title;
          return e.title || "";
        };
        const unnamed = [...document.querySelectorAll("input, select, textarea, button, a[href], summary")]
          .filter((e) => shown(e) && e.type !== "hidden" && !nameOf(e).trim())
          .map((e) => e.outerHTML.slice(0, 120));
        // Contrast of every element drawing its own text.
        const rgb = (v) => (v.match(/[\d.]+/g) || []).map(Number);
        const lum = ([r, g, b]) => {
          const f = (x) => ((x /= 255) <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4);
          return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
        };
        const bgOf = (e) => {
          for (let x = e; x; x = x.parentElement) {
            const c = rgb(getComputedStyle(x).backgroundColor);
            if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c;
          }
          return [255, 255, 255];
        };
        const low = [];
        for (const e of document.querySelectorAll("body *")) {
          if (!shown(e) || ![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
          const st = getComputedStyle(e);
          const l1 = lum(rgb(st.color)), l2 = lum(bgOf(e));
          const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
          const px = parseFloat(st.fontSize), bold = Number(st.fontWeight) >= 700;
          const need = px >= 24 || (bold && px >= 18.66) ? 3 : 4.5;
          if (ratio < need) low.push(`${e.tagName.toLowerCase()}.${e.className} "${e.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}:1`);
        }
        return { unnamed, low: [...new Set(low)] };
      });
    const pages = [
      ["things", () => nav("things")],
      ["thing page", () => click(`${row(c.id)} ${T("thing-link")}`, `thing-link of ${c.id}`).then(() => until("thing-title", () => visible(T("thing-title"))))],
      ["join", () => nav("join")],
      ["groups", () => nav("groups")],
      ["hub", () => nav("hub")],
    ];
    for (const [name, go] of pages) {
      await check(`${name}: every control named, text contrast AA`, async () => {
        await reset();
        await go();
        await until(`${name} drawn`, () => visible("main h1"));
        const r = await audit();
        if (r.unnamed.length) throw new Error(`controls without a name: ${r.unnamed.slice(0, 5).join(" | ")}`);
        if (r.low.length) throw new Error(`text below AA contrast: ${r.low.slice(0, 5).join(" | ")}`);
        return name;
      });
    }
    // In a tab of its own, from the top of a fresh load, as a keyboard
    // user arrives (the session's page has focus wherever it was left).
    await check("the keyboard alone reaches the navigation and opens a Thing", async () => {
      const p = await context.newPage();
      watch(p);
      try {
        await p.goto(base + "/", { waitUntil: "load", timeout: 4 * STEP });
        await until("the list", () => p.locator(row(c.id)).first().isVisible());
        const reached = [];
        for (let i = 0; i < 40; i++) {
          await p.keyboard.press("Tab");
          const id = await p.evaluate(() => {
            const e = document.activeElement;
            return e?.dataset?.testid === "thing-link" ? `thing-link:${e.closest("[data-id]")?.dataset.id}` : e?.dataset?.testid ?? e?.tagName;
          });
          reached.push(id);
          if (id === `thing-link:${c.id}`) break;
        }
        for (const want of ["nav-things", "nav-join", "nav-groups", "nav-hub", "search", `thing-link:${c.id}`]) {
          if (!reached.includes(want)) throw new Error(`Tab never reached ${want}: ${reached.join(" → ")}`);
        }
        const order = ["nav-things", "nav-hub", "search"].map((x) => reached.indexOf(x));
        if (!(order[0] < order[1] && order[1] < order[2])) throw new Error(`focus order: ${reached.join(" → ")}`);
        // A live update redraws the list: the focus must stay where it was.
        const title = `Renamed while focused ${Date.now()}`;
        const res = await fetch(`${base}/things/${encodeURIComponent(c.poke)}`, {
          method: "PATCH",
          headers: { Authorization: `Bearer ${adminToken}`, "Content-Type": "application/merge-patch+json" },
          body: JSON.stringify({ title }),
        });
        if (!res.ok) throw new Error(`PATCH ${c.poke}: ${res.status}`);
        await until("the list redrawn with the new title", async () => (await p.locator("main").textContent()).includes(title));
        const still = await p.evaluate(() => document.activeElement?.closest("[data-id]")?.dataset.id);
        if (still !== c.id) throw new Error(`after a live update the focus is on ${still ?? "nothing"}, not ${c.id}'s link`);
        const outline = await p.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
        if (outline === "none") throw new Error("the focused link shows no outline");
        await p.keyboard.press("Enter");
        await until(`the page of ${c.id}`, () => p.locator(T("thing-title")).first().isVisible());
        return reached.join(" → ");
      } finally {
        await p.close().catch(() => {});
      }
    });
  },

  // refusedToken: in a visit of its own (no token held), a change made
  // with a token the hub refuses (wrong: 401, read scope: 403) shows the
  // refusal as text; the Go side checks nothing changed.
  async refusedToken(c) {
    const main = page;
    const ctx = await browser.newContext({ viewport: WIDE });
    answerWith = c.token;
    expectStatus = new Set([c.status]);
    try {
      await openPage(ctx);
      await check(`a ${c.kind} token is refused with a message`, async () => {
        await nav("groups");
        await fill(T("group-create-id"), c.gid, "group-create-id");
        await click(T("group-create"), "group-create");
        const t = await until("the error banner", async () => {
          if (!(await visible(T("error-banner")))) return "";
          return (await text(T("error-banner"))).trim();
        });
        if (!t.includes(String(c.status))) throw new Error(`error-banner says ${JSON.stringify(t)}, which does not name the refusal (${c.status})`);
        return t.slice(0, 200);
      });
    } finally {
      answerWith = adminToken;
      expectStatus = new Set();
      await ctx.close().catch(() => {});
      page = main;
    }
  },

  // outage: the Go side restarts the hub on the same addresses now.
  async outage() {
    await check("list open before the hub restarts", async () => {
      await reset();
      await until(`row of ${"any Thing"}`, async () => (await page.locator(T("thing-row")).count()) > 0);
    });
    outage = true;
  },

  // recovered: the hub is back; without a reload the page shows a Thing
  // registered after the restart.
  async recovered(c) {
    await check("the page reconnects by itself after the hub restarts", async () => {
      try {
        // The page's own retry backoff: a longer step than the others.
        await until(`row of ${c.id}`, () => visible(row(c.id)), 2 * STEP);
        await noReload();
      } finally {
        outage = false;
      }
    });
  },

  // session: what holds for the whole visit.
  async session() {
    await check("nothing ran from a TD during the session", async () => {
      const pwned = await page.evaluate(() => window.__pwned);
      if (pwned !== undefined) throw new Error(`window.__pwned = ${pwned}`);
      await noReload();
    });
    await check("the token was asked for at most once", async () => {
      if (tokenGiven > 1) throw new Error(`asked ${tokenGiven} times in one visit`);
      return `asked ${tokenGiven} time(s)`;
    });
    await check("the token is in no storage that outlives the visit", async () => {
      const kept = await page.evaluate((tok) => {
        const where = [];
        // sessionStorage ends with the tab: allowed, as memory is.
        for (let i = 0; i < localStorage.length; i++) {
          if ((localStorage.getItem(localStorage.key(i)) ?? "").includes(tok)) where.push(`localStorage.${localStorage.key(i)}`);
        }
        if (location.href.includes(tok)) where.push("the URL");
        return where;
      }, adminToken);
      // A cookie with an expiry outlives the session (and goes with every
      // request).
      const cookies = (await context.cookies())
        .filter((k) => k.value.includes(adminToken) && k.expires !== -1)
        .map((k) => `cookie ${k.name}`);
      if (kept.length || cookies.length) throw new Error(`the token is kept in ${[...kept, ...cookies].join(", ")}`);
    });
  },

  // screenshot saves a view for the docs (no verdict: the checks judge).
  async screenshot(c) {
    try {
      await reset();
      if (c.thing) await openThing(c.thing);
      else if (c.nav) await nav(c.nav);
      if (c.viewport) await page.setViewportSize(c.viewport);
    } catch (e) {
      say({ info: `screenshot ${c.name}: ${e.message}` });
    }
    say({ screenshot: await screenshot(c.name, !c.viewportOnly) });
    await page.setViewportSize(WIDE);
  },
};

// fillForm fills action's generated form: each field by its name (nested
// members "a.b").
async function fillForm(action, fields) {
  const form = T(`action-form-${action}`);
  await until(`${form} shown`, () => visible(form));
  for (const [k, v] of Object.entries(fields ?? {})) {
    await fill(`${form} [name="${cssq(k)}"]`, v, `field ${k} of ${action}`);
  }
}

fs.mkdirSync(shots, { recursive: true });
try {
  await openPage();
} catch (e) {
  fail(`open ${base}/`, e);
}
say({ ready: base, browser: browser.version() });

const rl = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();
rl.on("line", (line) => {
  if (!line.trim()) return;
  chain = chain
    .then(async () => {
      const c = JSON.parse(line);
      if (c.cmd === "exit") {
        recording = false;
        await browser.close();
        say({ done: "exit" });
        process.exit(0);
      }
      const h = handlers[c.cmd];
      if (!h) throw new Error(`unknown command ${c.cmd}`);
      await h(c);
      say({ done: c.cmd });
    })
    .catch((e) => fail(`command ${line}`, e));
});
rl.on("close", () =>
  chain.then(async () => {
    recording = false;
    await browser.close();
    process.exit(0);
  }),
);
