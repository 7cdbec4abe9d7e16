// The Things list: live from the store, filtered, searched through
// /search/text, paged (50 a page) so a thousand Things render fast.
import { h, clear, marked, ago, shortDID, copyButton, debounce } from './dom.js';
import { store, subscribe, originText } from './store.js';
import { get, enc, explain } from './api.js';

const PAGE = 50;
// One collator for every comparison: localeCompare makes one a call.
const byTitle = new Intl.Collator();
// The filters and the page survive a visit to a Thing's page.
const state = { q: '', type: '', presence: '', origin: '', group: '', page: 0, hits: null, words: [], matches: new Map() };

// matchedTexts are the texts of a Thing a search matched, outside its
// title and description (which the row shows anyway): capability
// examples, affordance names and descriptions… (pointers from
// /search/text), at most three.
function matchedTexts(td, pointers) {
  const out = [];
  for (const p of pointers || []) {
    const parts = String(p).split('/').slice(1).map(x => x.replace(/~1/g, '/').replace(/~0/g, '~'));
    if (parts.length === 1 && (parts[0] === 'title' || parts[0] === 'description')) continue;
    let v = td;
    for (const k of parts) v = v !== null && typeof v === 'object' ? v[k] : undefined;
    const aff = ['actions', 'properties', 'events'].includes(parts[0]) && parts.length >= 2 ? parts[0].slice(0, -1) + ' ' + parts[1] : '';
    if (typeof v === 'string') out.push(aff && v !== parts[1] ? aff + ': ' + v : aff || v);
    else if (aff) out.push(aff);
    if (out.length === 3) break;
  }
  return out;
}

function select(testid, label, options, value, onChange) {
  const id = 'f-' + testid;
  const s = h('select', { id, testid, on: { change: e => onChange(e.target.value) } },
    options.map(([v, t]) => h('option', { value: v, text: t })));
  s.value = value;
  return h('span', { class: 'field' }, h('label', { for: id, text: label }), s);
}

export function thingsView(root) {
  const tbody = h('tbody');
  const info = h('p', { class: 'muted', testid: 'things-count', 'aria-live': 'polite' });
  const pager = h('div', { class: 'pager' });
  const groupSel = h('span');
  const search = h('input', {
    id: 'search', testid: 'search', type: 'search', value: state.q, placeholder: 'Search capabilities, titles, actions…',
    autocomplete: 'off', on: { input: debounce(e => runSearch(e.target.value), 250) },
  });

  const set = k => v => { state[k] = v; state.page = 0; render(); };
  root.append(
    h('h1', { text: 'Things' }),
    h('div', { class: 'filters' },
      h('span', { class: 'field grow' }, h('label', { for: 'search', text: 'Search' }), search),
      select('filter-type', 'Type', [['', 'All'], ['Agent', 'Agent'], ['Tool', 'Tool'], ['Thing', 'Thing']], state.type, set('type')),
      select('filter-presence', 'Presence', [['', 'All'], ['online', 'online'], ['offline', 'offline'], ['unknown', 'unknown']], state.presence, set('presence')),
      select('filter-origin', 'Origin', [['', 'All'], ['mqtt', 'MQTT'], ['ws', 'WebSocket'], ['mdns', 'mDNS'], ['http', 'HTTP'], ['remote', 'remote']], state.origin, set('origin')),
      groupSel),
    info,
    h('div', { class: 'scroll' }, h('table', { class: 'things' },
      h('thead', {}, h('tr', {}, ['Title', 'Type', 'Presence', 'Origin', 'Verified', 'Groups', 'Capabilities'].map(t => h('th', { scope: 'col', text: t })))),
      tbody)),
    pager);

  let lastGroups = '';
  function renderGroupFilter() {
    const key = store.groups.map(g => g.id).join('\n');
    if (key === lastGroups && groupSel.firstChild) return;
    lastGroups = key;
    groupSel.replaceChildren(select('filter-group', 'Group', [['', 'All'], ...store.groups.map(g => [g.id, g.title || g.id])], state.group, set('group')));
  }

  async function runSearch(q) {
    if (q !== state.q) state.page = 0;
    state.q = q;
    const words = q.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) { state.hits = null; state.words = []; render(); return; }
    try {
      const hits = await get('/search/text?limit=1000&q=' + enc(q));
      if (state.q !== q) return;
      state.hits = hits.map(x => x.id);
      state.matches = new Map(hits.map(x => [x.id, x.matches]));
      state.words = words;
    } catch (e) {
      state.hits = [];
      info.textContent = 'Search failed: ' + explain(e);
    }
    render();
  }

  function visible() {
    let list;
    if (state.hits) list = state.hits.map(id => store.things.get(id)).filter(Boolean);
    else list = [...store.things.values()].sort((a, b) => byTitle.compare(a.title, b.title) || (a.id < b.id ? -1 : 1));
    return list.filter(r =>
      (!state.type || r.kind === state.type) &&
      (!state.presence || (r.presence.status || 'unknown') === state.presence) &&
      (!state.origin || r.origin === state.origin) &&
      (!state.group || (store.memberOf.get(r.id) || []).includes(state.group)));
  }

  function row(r) {
    const w = state.words;
    const status = r.presence.status || 'unknown';
    const pres = h('span', { class: 'badge ' + status, text: status });
    const seen = status === 'offline' && r.presence.since ? h('span', { class: 'muted small', text: ' last seen ' + ago(r.presence.since) }) : null;
    const desc = typeof r.td.description === 'string' ? r.td.description : '';
    const found = state.hits ? matchedTexts(r.td, state.matches.get(r.id)) : [];
    const caps = r.caps.slice(0, 4).map(c => h('span', { class: 'chip' }, marked(c && (c.name || c.id) || '', w)));
    return h('tr', { testid: 'thing-row', 'data-id': r.id, 'data-presence': status, class: status },
      h('td', {},
        h('a', { testid: 'thing-link', href: '#/thing/' + enc(r.id) }, marked(r.title, w)),
        desc ? h('div', { class: 'muted small clip' }, marked(desc.slice(0, 160), w)) : null,
        found.length ? h('div', { class: 'small clip', testid: 'search-matches' }, 'matched: ', found.map((t, i) => [i ? ' · ' : '', marked(t.slice(0, 120), w)])) : null,
        h('div', { class: 'muted small mono clip', text: r.id })),
      h('td', { 'data-label': 'Type', text: r.kind }),
      h('td', { 'data-label': 'Presence' }, pres, seen),
      h('td', { 'data-label': 'Origin', testid: 'thing-origin', text: originText(r) }),
      h('td', { 'data-label': 'Verified' }, r.verified ? [h('span', { class: 'mono', title: r.verified, text: shortDID(r.verified) }), ' ', copyButton(r.verified)] : '—'),
      h('td', { 'data-label': 'Groups', text: (store.memberOf.get(r.id) || []).join(', ') || '—' }),
      h('td', { 'data-label': caps.length ? 'Capabilities' : null }, caps));
  }

  function render() {
    renderGroupFilter();
    const list = visible();
    const pages = Math.max(1, Math.ceil(list.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    const slice = list.slice(state.page * PAGE, (state.page + 1) * PAGE);
    // A live update redraws the rows: the focus stays on the same Thing's
    // control, so a keyboard user tabbing through the list keeps their place.
    const had = tbody.contains(document.activeElement) ? document.activeElement : null;
    const keep = had && had.closest('[data-id]') && [had.closest('[data-id]').dataset.id, had.dataset.testid];
    clear(tbody).append(...slice.map(row));
    if (keep) {
      const again = [...tbody.querySelectorAll('[data-id]')].find(r => r.dataset.id === keep[0]);
      const el = again && (keep[1] ? again.querySelector(`[data-testid="${keep[1]}"]`) : null);
      if (el) el.focus();
    }
    if (!slice.length) {
      tbody.append(h('tr', {}, h('td', { colspan: 7, class: 'muted',
        text: !store.ready ? 'Loading…' : store.things.size ? 'No Thing matches.' : 'Nothing registered yet.' })));
    }
    info.textContent = `${list.length} of ${store.things.size} Things` + (state.hits ? ` match “${state.q}”` : '');
    clear(pager);
    if (pages > 1) {
      pager.append(
        h('button', { type: 'button', disabled: state.page === 0, text: '‹ Previous', on: { click: () => { state.page--; render(); } } }),
        h('span', { text: ` page ${state.page + 1} of ${pages} ` }),
        h('button', { type: 'button', disabled: state.page >= pages - 1, text: 'Next ›', on: { click: () => { state.page++; render(); } } }));
    }
  }

  render();
  if (state.q) runSearch(state.q);
  // While a search is shown, Things that join or change are searched
  // again, at most every 2 s.
  let again = null;
  const unsub = subscribe(() => {
    render();
    if (state.q && !again) again = setTimeout(() => { again = null; if (state.q) runSearch(state.q); }, 2000);
  });
  const tick = setInterval(render, 30000); // "last seen" ages
  return () => { unsub(); clearInterval(tick); clearTimeout(again); };
}
