// Join requests: the join mode, a permit-join window with its countdown
// (up to the hub's 254 s), and the pending Things with approve and deny.
// The whole join API needs an admin token.
import { h, clear, ago } from './dom.js';
import { onHubEvent } from './store.js';
import { get, request, change, enc, explain, showError, clearError, askToken, onToken } from './api.js';

export function joinView(root) {
  const mode = h('span', { testid: 'join-mode', text: '…' });
  const countdown = h('span', { testid: 'permit-countdown', class: 'countdown', 'aria-live': 'off', text: '' });
  const seconds = h('input', { id: 'permit-seconds', type: 'number', min: 1, max: 254, step: 1, value: 254, inputmode: 'numeric' });
  const permit = h('button', { type: 'button', testid: 'permit-join', text: 'Permit join', on: { click: doPermit } });
  const stop = h('button', { type: 'button', class: 'secondary', testid: 'permit-stop', text: 'Close window', on: { click: () => doPermit(0) } });
  const tbody = h('tbody');
  const info = h('p', { class: 'muted small', 'aria-live': 'polite' });
  let until = 0;

  root.append(
    h('h1', { text: 'Join requests' }),
    h('dl', { class: 'kv' }, h('dt', { text: 'Join mode' }), h('dd', {}, mode)),
    h('div', { class: 'row' },
      h('label', { for: 'permit-seconds', text: 'Window (s, at most 254)' }), seconds, permit, stop,
      h('span', {}, 'open for ', countdown)),
    h('h2', { text: 'Pending' }),
    info,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Thing', 'Door', 'From', 'Offers', 'Received', ''].map(t => h('th', { scope: 'col', text: t })))),
      tbody)));

  function tick() {
    const left = Math.max(0, Math.round((until - Date.now()) / 1000));
    countdown.textContent = left > 0 ? left + ' s' : 'closed';
    stop.hidden = left === 0;
  }

  function showState(st) {
    mode.textContent = st.mode + (st.effective && st.effective !== st.mode ? ' (now ' + st.effective + ')' : '');
    until = st.remaining > 0 ? Date.now() + st.remaining * 1000 : 0; // the hub's clock, not this device's
    tick();
  }

  function row(p) {
    const offers = [
      p.properties.length ? 'properties: ' + p.properties.join(', ') : '',
      p.actions.length ? 'actions: ' + p.actions.join(', ') : '',
      p.events.length ? 'events: ' + p.events.join(', ') : ''].filter(Boolean).join('; ');
    const decide = verb => async () => {
      try {
        await change('POST', '/api/join/pending/' + enc(p.id) + '/' + verb);
        clearError();
        load();
      } catch (e) { showError(explain(e)); }
    };
    return h('tr', { testid: 'pending-row', 'data-id': p.id },
      h('td', {}, h('div', { text: p.title || p.id }), h('div', { class: 'mono small muted', text: p.id }),
        p.signer ? h('div', { class: 'small muted', text: 'signed by ' + p.signer }) : h('div', { class: 'small muted', text: 'unsigned' })),
      h('td', { text: p.door }),
      h('td', { class: 'mono small', text: p.source + (p.proven ? ' (proven)' : '') }),
      h('td', { class: 'small', text: offers || '—' }),
      h('td', { class: 'small', text: ago(p.received) }),
      h('td', {}, h('div', { class: 'row' },
        h('button', { type: 'button', testid: 'approve', text: 'Approve', 'aria-label': 'Approve ' + (p.title || p.id), on: { click: decide('approve') } }),
        h('button', { type: 'button', testid: 'deny', class: 'danger', text: 'Deny', 'aria-label': 'Deny ' + (p.title || p.id), on: { click: decide('deny') } }))));
  }

  async function load() {
    try {
      const st = await request('GET', '/api/join');
      showState(st);
      clear(tbody).append(...st.list.map(row));
      info.textContent = st.list.length ? st.list.length + ' waiting' : 'Nobody is waiting.';
    } catch (e) {
      if (e.status === 401) {
        // The token was not given: what anyone may read, and a way back.
        get('/api/status').then(st => { if (st.join) showState(st.join); }, () => {}); // public: mode and window
        info.replaceChildren('The pending list needs an admin token. ',
          h('button', { type: 'button', class: 'small', testid: 'token-ask', text: 'Enter token', on: { click: () => askToken() } }));
        return;
      }
      info.textContent = 'Cannot read the join state: ' + explain(e);
      if (e.status === 403) showError(explain(e));
    }
  }

  async function doPermit(n) {
    const s = typeof n === 'number' ? n : Number(seconds.value);
    if (!Number.isInteger(s) || s < 0 || s > 254) { showError('The window is 1 to 254 seconds.'); return; }
    try {
      const st = await change('POST', '/api/join/permit', { body: { seconds: s } });
      clearError();
      load();
      showState(st);
    } catch (e) { showError(explain(e)); }
  }

  load();
  const unToken = onToken(load);
  const timer = setInterval(tick, 1000);
  let again = null;
  const unsub = onHubEvent(name => {
    if (!name.startsWith('join_') && name !== 'thing_created') return;
    clearTimeout(again);
    again = setTimeout(load, 200);
  });
  return () => { clearInterval(timer); clearTimeout(again); unsub(); unToken(); };
}
