// The dashboard's entry: hash routes, the connection badge, the live feed.
import { store, subscribe, start } from './store.js';
import { clearError } from './api.js';
import { thingsView } from './things.js';

const view = document.getElementById('view');
const routes = [
  [/^#?\/?$/, () => thingsView],
  [/^#\/thing\/(.+)$/, () => import('./thing.js').then(m => m.thingView)],
  [/^#\/join$/, () => import('./join.js').then(m => m.joinView)],
  [/^#\/groups$/, () => import('./groups.js').then(m => m.groupsView)],
  [/^#\/group\/(.+)$/, () => import('./groups.js').then(m => m.groupView)],
  [/^#\/hub$/, () => import('./hubpage.js').then(m => m.hubView)],
];

let cleanup = null;
let seq = 0;
let routed = 0;

async function route() {
  const my = ++seq;
  if (cleanup) { try { cleanup(); } catch { /* the old view */ } cleanup = null; }
  clearError();
  const hash = location.hash || '#/';
  for (const [re, load] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    let fn;
    try { fn = await load(); } catch (e) {
      await reloadIfUpgraded();
      view.replaceChildren(document.createTextNode('Cannot load this page: ' + e.message));
      return;
    }
    if (my !== seq) return;
    view.replaceChildren();
    const args = m.slice(1).map(decodeURIComponent);
    cleanup = fn(view, ...args) || null;
    // A new page: keyboard and screen-reader users start at its top.
    if (routed++) view.focus({ preventScroll: false });
    for (const a of document.querySelectorAll('nav a')) {
      const on = a.getAttribute('href') === hash || (a.getAttribute('href') === '#/' && /^#\/(thing\/|$)/.test(hash));
      if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    return;
  }
  view.replaceChildren(document.createTextNode('No such page.'));
}

// A page loaded before the hub was upgraded asks for modules of its old
// build, which the hub no longer has: load the new build instead.
async function reloadIfUpgraded() {
  const mine = new URL(import.meta.url).pathname.split('/')[2];
  try {
    const page = await (await fetch('/', { cache: 'no-store' })).text();
    const now = (page.match(/\/ui\/([0-9a-f]+)\/app\.js/) || [])[1];
    if (now && now !== mine) location.reload();
  } catch { /* the hub is away: the feed reconnects */ }
}

const conn = document.getElementById('conn');
subscribe(() => {
  conn.textContent = store.conn === 'live' ? 'live' : store.conn === 'reconnecting' ? 'reconnecting…' : 'connecting…';
  conn.className = 'conn ' + store.conn;
});

window.addEventListener('hashchange', route);
route();
start();
