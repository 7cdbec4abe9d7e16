// Groups: list and create; a group's page with its members (add, remove),
// their membership credentials, dissolve, and a group action with one
// result per member as each answers.
import { h, clear, ago, shortDID } from './dom.js';
import { store, subscribe, onHubEvent } from './store.js';
import { get, change, stream, enc, explain, showError, clearError } from './api.js';

const fail = e => showError(explain(e));

function onGroupEvents(load, gid) {
  let t = null;
  const unsub = onHubEvent((name, d) => {
    if (name !== 'group' && name !== 'thing_deleted') return;
    if (gid && d.group && d.group.group !== gid) return;
    clearTimeout(t);
    t = setTimeout(load, 150);
  });
  return () => { clearTimeout(t); unsub(); };
}

export function groupsView(root) {
  const tbody = h('tbody');
  const id = h('input', { id: 'group-create-id', testid: 'group-create-id', autocomplete: 'off', pattern: '[A-Za-z0-9][A-Za-z0-9._-]{0,63}', placeholder: 'kitchen' });
  const title = h('input', { id: 'group-create-title', testid: 'group-create-title', autocomplete: 'off', placeholder: 'Kitchen' });
  const create = h('form', { class: 'row', novalidate: true },
    h('span', { class: 'field' }, h('label', { for: 'group-create-id', text: 'Id' }), id),
    h('span', { class: 'field' }, h('label', { for: 'group-create-title', text: 'Title' }), title),
    h('button', { type: 'submit', testid: 'group-create', text: 'Create group' }));
  create.addEventListener('submit', async e => {
    e.preventDefault();
    const body = { title: title.value.trim() || id.value.trim() || 'Group' };
    if (id.value.trim()) body.id = id.value.trim();
    try {
      const g = await change('POST', '/api/groups', { body });
      clearError();
      id.value = title.value = '';
      location.hash = '#/group/' + enc(g.id);
    } catch (err) { fail(err); }
  });
  const info = h('p', { class: 'muted small' });
  root.append(h('h1', { text: 'Groups' }), create, info,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Group', 'Members', 'Flags', 'Modified'].map(t => h('th', { scope: 'col', text: t })))), tbody)));

  async function load() {
    try {
      const gs = await get('/api/groups');
      clear(tbody).append(...gs.map(g => h('tr', { testid: 'group-row', 'data-id': g.id },
        h('td', {}, h('a', { href: '#/group/' + enc(g.id), text: g.title || g.id }), h('div', { class: 'mono small muted', text: g.id })),
        h('td', { text: String((g.members || []).length) }),
        h('td', { class: 'small', text: [g.requireSigned ? 'signed members only' : '', g.selfJoin ? 'self-join' : ''].filter(Boolean).join(', ') || '—' }),
        h('td', { class: 'small', text: ago(g.modified) }))));
      info.textContent = gs.length ? gs.length + ' groups' : 'No groups yet.';
    } catch (e) { info.textContent = 'Cannot read the groups: ' + explain(e); }
  }
  load();
  return onGroupEvents(load);
}

export function groupView(root, gid) {
  const path = '/api/groups/' + enc(gid);
  const head = h('div');
  const tbody = h('tbody');
  const add = h('input', { id: 'member-add-id', testid: 'member-add-id', list: 'thing-ids', autocomplete: 'off', placeholder: 'Thing id' });
  const ids = h('datalist', { id: 'thing-ids' });
  const addForm = h('form', { class: 'row', novalidate: true },
    h('label', { for: 'member-add-id', text: 'Add a member' }), add, ids, h('button', { type: 'submit', testid: 'member-add', text: 'Add' }));
  addForm.addEventListener('submit', async e => {
    e.preventDefault();
    const t = add.value.trim();
    if (!t) { add.focus(); return; }
    try { await change('PUT', path + '/members/' + enc(t)); clearError(); add.value = ''; load(); } catch (err) { fail(err); }
  });

  const actionName = h('input', { id: 'group-action-name', testid: 'group-action-name', list: 'group-actions', autocomplete: 'off' });
  const actionList = h('datalist', { id: 'group-actions' });
  const actionInput = h('textarea', { id: 'group-action-input', testid: 'group-action-input', class: 'mono', rows: 3, placeholder: 'input as JSON (optional)' });
  const actionErr = h('div', { testid: 'field-error', class: 'field-error' });
  const results = h('tbody', { 'aria-live': 'polite' });
  const summary = h('p', { class: 'muted small', testid: 'group-action-summary', 'aria-live': 'polite' });
  const actionForm = h('form', { testid: 'group-action-form', novalidate: true },
    h('div', { class: 'form-field' }, h('label', { for: 'group-action-name', text: 'Action' }), actionName, actionList),
    h('div', { class: 'form-field' }, h('label', { for: 'group-action-input', text: 'Input' }), actionInput, actionErr),
    h('button', { type: 'submit', testid: 'group-action-submit', text: 'Run on every member' }));
  let running = null;
  actionForm.addEventListener('submit', async e => {
    e.preventDefault();
    actionErr.textContent = '';
    const name = actionName.value.trim();
    if (!name) { actionErr.textContent = 'name an action'; return; }
    let body;
    if (actionInput.value.trim()) {
      try { body = JSON.stringify(JSON.parse(actionInput.value)); } catch (err) { actionErr.textContent = 'not valid JSON: ' + err.message; return; }
    }
    if (running) running.close();
    clear(results);
    summary.textContent = 'Running…';
    const s = running = stream(path + '/actions/' + enc(name), {
      method: 'POST', body, ask: true,
      onEvent: (ev, d) => {
        if (ev === 'result' && d && typeof d === 'object') {
          results.append(h('tr', { testid: 'group-action-result-row', 'data-id': d.member },
            h('td', { class: 'mono small', text: d.member }),
            h('td', {}, h('span', { class: 'badge ' + (d.status === 'completed' ? 'online' : 'failed'), text: d.status })),
            h('td', {}, h('pre', { text: d.error ? (d.error.detail || d.error.title || '') : JSON.stringify(d.output ?? null, null, 2) }))));
        } else if (ev === 'done' && d && typeof d === 'object') {
          summary.textContent = Object.entries(d).filter(([k]) => k !== 'group' && k !== 'action').map(([k, v]) => k + ': ' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(', ');
        }
      },
    });
    try { await s.done; } catch (err) { summary.textContent = explain(err); fail(err); }
  });

  const dissolve = h('button', { type: 'button', class: 'danger', testid: 'group-dissolve', text: 'Dissolve group', on: { click: async () => {
    if (!confirm('Dissolve ' + gid + '? Every membership is revoked.')) return;
    try { await change('DELETE', path); clearError(); location.hash = '#/groups'; } catch (err) { fail(err); }
  } } });

  root.append(h('p', { class: 'small' }, h('a', { href: '#/groups', text: '‹ All groups' })), head,
    h('h2', { text: 'Members' }), addForm,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Thing', 'Verified by', 'Since', 'Credential', ''].map(t => h('th', { scope: 'col', text: t })))), tbody)),
    h('h2', { text: 'Group action' }), actionForm, summary,
    h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, h('tr', {}, ['Member', 'Status', 'Result'].map(t => h('th', { scope: 'col', text: t })))), results)),
    h('h2', { text: 'Dissolve' }), h('p', { class: 'muted small', text: 'Revokes every membership and its credential.' }), dissolve);

  function credentialCell(member) {
    const cell = h('td');
    const btn = h('button', { type: 'button', class: 'small', text: 'Check', on: { click: async () => {
      try {
        const vc = await get(path + '/members/' + enc(member) + '/credential');
        const until = vc.validUntil || vc.expirationDate;
        cell.replaceChildren(h('span', { class: 'small', text: 'issued' + (until ? ', valid until ' + until : '') }));
      } catch (err) { cell.replaceChildren(h('span', { class: 'small muted', text: explain(err) })); }
    } } });
    cell.append(btn);
    return cell;
  }

  async function load() {
    let g;
    try { g = await get(path); } catch (e) {
      clear(head).append(h('h1', { text: gid }), h('p', { text: 'Cannot read this group: ' + explain(e) }));
      return;
    }
    clear(head).append(h('h1', { testid: 'group-title', text: g.title || g.id }),
      g.description ? h('p', { text: g.description }) : '',
      h('p', { class: 'muted small', text: [g.id, g.requireSigned ? 'signed members only' : '', g.selfJoin ? 'self-join' : ''].filter(Boolean).join(' · ') }));
    const since = new Map((g.memberships || []).map(m => [m.thing, m]));
    clear(tbody).append(...(g.members || []).map(m => {
      const ms = since.get(m) || {};
      const rec = store.things.get(m);
      return h('tr', { testid: 'member-row', 'data-id': m },
        h('td', {}, h('a', { href: '#/thing/' + enc(m), text: rec ? rec.title : m }), h('div', { class: 'mono small muted', text: m })),
        h('td', { class: 'mono small', title: ms.did || '', text: ms.did ? shortDID(ms.did) : '—' }),
        h('td', { class: 'small', text: ms.since ? ago(ms.since) : '—' }),
        credentialCell(m),
        h('td', {}, h('button', { type: 'button', class: 'small', testid: 'member-remove', text: 'Remove', 'aria-label': 'Remove ' + m, on: { click: async () => {
          try { await change('DELETE', path + '/members/' + enc(m)); clearError(); load(); } catch (err) { fail(err); }
        } } })));
    }));
    const acts = new Set();
    for (const m of g.members || []) for (const a of Object.keys((store.things.get(m) || { td: {} }).td.actions || {})) acts.add(a);
    clear(actionList).append(...[...acts].sort().map(a => h('option', { value: a })));
  }
  const fillIds = () => clear(ids).append(...[...store.things.keys()].slice(0, 500).map(i => h('option', { value: i })));
  fillIds();
  load();
  const unsubs = [onGroupEvents(load, gid), subscribe(fillIds)];
  return () => { if (running) running.close(); unsubs.forEach(u => u()); };
}
