// The live state of the directory: a snapshot of /things and /api/groups,
// then the deltas of the hub's feed (/api/events?diff=true). Listeners are
// told at once and then at most every 200 ms, so a burst of events renders
// at its start and once every 200 ms after.
import { get, stream, enc } from './api.js';

export const store = {
  things: new Map(), // id → record
  groups: [],
  memberOf: new Map(), // thing id → [group ids]
  ready: false,
  conn: 'connecting',
  revision: 0,
};

const listeners = new Set();
const hubListeners = new Set();
let timer = null;

export function subscribe(fn) { listeners.add(fn); return () => listeners.delete(fn); }
// onHubEvent gets every event of the feed as it comes (join, group, …).
export function onHubEvent(fn) { hubListeners.add(fn); return () => hubListeners.delete(fn); }

// changed tells the listeners at once, then at most every 200 ms while
// changes keep coming (a burst renders at its start and once after).
let pending = false;
function changed() {
  store.revision++;
  if (timer) { pending = true; return; }
  const tell = () => { for (const fn of listeners) fn(); };
  const quiet = () => {
    timer = pending ? setTimeout(quiet, 200) : null;
    if (pending) { pending = false; tell(); }
  };
  timer = setTimeout(quiet, 200);
  tell();
}

export function kindOf(td) {
  const t = [].concat(td['@type'] || []).map(String);
  if (t.some(x => /(^|:)Agent$/.test(x))) return 'Agent';
  if (t.some(x => /(^|:)Tool$/.test(x))) return 'Tool';
  return 'Thing';
}

export function record(td) {
  const pres = td['lmos:presence'] || { status: 'unknown' };
  return {
    id: td.id,
    td,
    title: typeof td.title === 'string' ? td.title : td.id,
    kind: kindOf(td),
    presence: pres,
    origin: (td['lmos:origin'] && td['lmos:origin'].source) || '',
    // home is the hub a mirrored (remote) Thing lives on.
    home: (td['lmos:origin'] && typeof td['lmos:origin'].hub === 'string' && td['lmos:origin'].hub) || '',
    verified: typeof td['lmos:verified'] === 'string' ? td['lmos:verified'] : '',
    caps: Array.isArray(td['lmos:capabilities']) ? td['lmos:capabilities'] : [],
  };
}

// originText says where a Thing came from; a mirrored Thing names the
// hub it lives on.
export function originText(r) {
  if (r.origin === 'remote' && r.home) {
    let host = r.home;
    try { host = new URL(r.home).host; } catch { /* not a URL: shown as is */ }
    return 'remote · ' + host;
  }
  return r.origin || '—';
}

// mergePatch applies an RFC 7396 merge patch.
export function mergePatch(target, patch) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = (target && typeof target === 'object' && !Array.isArray(target)) ? Object.assign({}, target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

let refetch = new Set();
let refetchTimer = null;
let deletedMeanwhile = null;

// refresh fetches the enriched TDs of the ids named (at most 20 at once),
// so a created Thing gets its presence and origin; more than that at once
// (a burst of joins) reads the whole list once instead.
const REFETCH_EACH = 20;
function refresh(id) {
  refetch.add(id);
  if (refetchTimer) return;
  refetchTimer = setTimeout(async () => {
    const ids = [...refetch];
    refetch.clear();
    if (ids.length > REFETCH_EACH) {
      // A Thing deleted while the list is read may still be in it.
      deletedMeanwhile = new Set();
      try {
        const all = await get('/things');
        store.things = new Map(all.map(td => [td.id, record(td)]));
        for (const i of deletedMeanwhile) store.things.delete(i);
      } catch { ids.forEach(i => refetch.add(i)); } // tried again below
      deletedMeanwhile = null;
    } else {
      await Promise.all(ids.map(async i => {
        try { store.things.set(i, record(await get('/things/' + enc(i)))); }
        catch { /* gone again */ }
      }));
    }
    refetchTimer = null;
    changed();
    if (refetch.size) refresh([...refetch][0]);
  }, 150);
}

let groupTimer = null;
export function loadGroups() {
  clearTimeout(groupTimer);
  groupTimer = setTimeout(async () => {
    try {
      const gs = await get('/api/groups');
      store.groups = gs;
      store.memberOf = new Map();
      for (const g of gs) for (const m of g.members || []) {
        if (!store.memberOf.has(m)) store.memberOf.set(m, []);
        store.memberOf.get(m).push(g.id);
      }
      changed();
    } catch { /* groups unavailable */ }
  }, 50);
}

// apply changes the store by one event of the feed and tells the
// listeners (not while the snapshot's queue is replayed: once after).
function apply(name, d, quiet = false) {
  switch (name) {
    case 'thing_created':
      if (d.td) store.things.set(d.id, record(Object.assign({ id: d.id }, d.td)));
      refresh(d.id);
      break;
    case 'thing_updated': {
      const r = store.things.get(d.id);
      if (r && d.patch) {
        const td = mergePatch(r.td, d.patch);
        td['lmos:presence'] = r.presence;
        store.things.set(d.id, Object.assign(record(td), { presence: r.presence }));
      } else refresh(d.id);
      break;
    }
    case 'thing_deleted':
      store.things.delete(d.id);
      if (deletedMeanwhile) deletedMeanwhile.add(d.id);
      break;
    case 'presence': {
      const r = store.things.get(d.id);
      if (r && d.presence) { r.presence = d.presence; r.td['lmos:presence'] = d.presence; }
      break;
    }
    case 'binding':
      refresh(d.id);
      break;
    case 'group':
      loadGroups();
      break;
  }
  if (!quiet) changed();
}

// start keeps the feed open for good: on any end it reconnects after a
// pause and reads the snapshot again (presence and join events are state,
// not replayed).
export async function start() {
  for (let pause = 1000; ; pause = Math.min(pause * 2, 8000)) {
    let queue = [];
    let live = false;
    const s = stream('/api/events?diff=true', {
      onEvent: (name, data) => {
        if (!data || typeof data !== 'object') return;
        if (live) apply(name, data); else queue.push([name, data]);
        for (const fn of hubListeners) fn(name, data);
      },
    });
    try {
      const all = await get('/things');
      store.things = new Map(all.map(td => [td.id, record(td)]));
      loadGroups();
      live = true;
      for (const [n, d] of queue) apply(n, d, true);
      queue = null;
      store.ready = true;
      store.conn = 'live';
      pause = 1000;
      changed();
      await s.done;
    } catch (e) {
      store.lastError = e;
    }
    s.close();
    store.conn = 'reconnecting';
    changed();
    await new Promise(r => setTimeout(r, pause));
  }
}
