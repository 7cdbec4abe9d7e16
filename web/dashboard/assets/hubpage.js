// The hub: status (/api/status), broker figures (/metrics), links and
// paired hubs (links.js), tokens
// (create with scope and expiry, revoke), a backup download (/api/backup)
// and the live log tail (/api/log).
import { h, clear, ago, copyButton, logList } from './dom.js';
import { linksView } from './links.js';
import { onHubEvent } from './store.js';
import { get, request, change, stream, enc, explain, showError, clearError, askToken, onToken, hasToken } from './api.js';

const MAX_LOG = 300;

export function hubView(root) {
  const status = h('dl', { class: 'kv' });
  const broker = h('dl', { class: 'kv' });
  const tokens = h('tbody');
  const tokenInfo = h('p', { class: 'muted small' });
  const tokenValue = h('div', { 'aria-live': 'polite' });
  const logEl = h('ol', { testid: 'log-tail', class: 'log', reversed: true, 'aria-live': 'off' });
  const logNote = h('span', { class: 'muted small' });
  const level = h('select', { id: 'log-level', testid: 'log-level', on: { change: () => tailLog() } },
    ['debug', 'info', 'warn', 'error'].map(l => h('option', { value: l, text: l })));
  level.value = 'info';

  const name = h('input', { id: 'token-create-name', testid: 'token-create-name', autocomplete: 'off', placeholder: 'phone' });
  const scope = h('select', { id: 'token-create-scope', testid: 'token-create-scope' }, ['read', 'operate', 'admin'].map(s => h('option', { value: s, text: s })));
  const expires = h('input', { id: 'token-create-expires', testid: 'token-create-expires', autocomplete: 'off', placeholder: '30d (empty: never)' });
  const create = h('form', { class: 'row', novalidate: true },
    h('span', { class: 'field' }, h('label', { for: 'token-create-name', text: 'Name' }), name),
    h('span', { class: 'field' }, h('label', { for: 'token-create-scope', text: 'Scope' }), scope),
    h('span', { class: 'field' }, h('label', { for: 'token-create-expires', text: 'Expires after' }), expires),
    h('button', { type: 'submit', testid: 'token-create', text: 'Create token' }));
  create.addEventListener('submit', async e => {
    e.preventDefault();
    const body = { name: name.value.trim() || 'dashboard', scope: scope.value };
    if (expires.value.trim()) body.expires = expires.value.trim();
    try {
      const t = await change('POST', '/api/tokens', { body });
      clearError();
      clear(tokenValue).append(h('div', { class: 'card' },
        h('p', { text: 'The new token, shown this once:' }),
        h('code', { testid: 'token-value', text: t.token }), ' ', copyButton(t.token)));
      loadTokens();
    } catch (err) { showError(explain(err)); }
  });

  // A backup is the store's snapshot (POST /api/backup, admin token),
  // saved as a file; `lmos-hub restore FILE` puts it back.
  const backupInfo = h('span', { class: 'muted small', testid: 'backup-info', 'aria-live': 'polite' });
  const backupButton = h('button', { type: 'button', testid: 'backup-download', text: 'Download backup', on: { click: async () => {
    backupButton.disabled = true;
    backupInfo.textContent = 'Taking a backup…';
    try {
      const blob = await change('POST', '/api/backup', { accept: 'application/octet-stream', as: 'blob' });
      const name = 'lmos-hub-' + new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '') + '.db';
      const a = h('a', { href: URL.createObjectURL(blob), download: name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 60000);
      backupInfo.textContent = 'Saved ' + name + ' (' + blob.size + ' bytes); restore it with lmos-hub restore FILE.';
      clearError();
    } catch (err) {
      backupInfo.textContent = '';
      showError(explain(err));
    } finally { backupButton.disabled = false; }
  } } });

  const linksEl = h('section', { 'aria-label': 'Links and paired hubs' });
  root.append(
    h('h1', { text: 'Hub' }), status,
    h('h2', { text: 'Backup' }), h('div', { class: 'row' }, backupButton, backupInfo),
    h('h2', { text: 'Broker' }), broker,
    linksEl,
    h('h2', { text: 'Tokens' }), create, tokenValue, tokenInfo,
    h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, ['Name', 'Scope', 'Created', 'Expires', 'State', ''].map(t => h('th', { scope: 'col', text: t })))), tokens)),
    h('h2', { text: 'Log' }),
    h('div', { class: 'row' }, h('label', { for: 'log-level', text: 'Level' }), level, logNote),
    logEl);

  const kv = (dl, pairs) => clear(dl).append(...pairs.filter(p => p[1] !== undefined && p[1] !== null && p[1] !== '').flatMap(([k, v, testid]) =>
    [h('dt', { text: k }), h('dd', { testid, class: testid === 'hub-did' || testid === 'hub-id' ? 'mono' : null }, v instanceof Node ? v : String(v))]));

  // The URL an LLM client is given: this page's origin, the door's path.
  function mcpEndpoint(path) {
    const url = location.origin + path;
    return h('span', {}, h('code', { text: url }), ' ', copyButton(url));
  }

  async function loadStatus() {
    try {
      const s = await get('/api/status');
      const comps = Object.entries(s.components || {}).map(([k, v]) => k + ': ' + v).join(', ');
      kv(status, [
        ['Name', s.name], ['Version', s.version, 'hub-version'], ['Uptime', s.uptime, 'hub-uptime'],
        ['Hub id', s.hubId, 'hub-id'], ['DID', s.did, 'hub-did'],
        ['Things', s.things], ['Registry revision', s.revision],
        ['Store size', s.storeBytes !== undefined ? (s.storeBytes / 1024).toFixed(0) + ' KiB' : undefined],
        ['Components', comps], ['Anonymous clients may', s.access && s.access.anonymous],
        ['Join mode', s.join && s.join.mode],
        ['MCP (LLM clients)', s.mcp && mcpEndpoint(s.mcp.path), 'hub-mcp'],
        ['mDNS', s.mdns && mdnsText(s.mdns), 'hub-mdns'],
        ['TLS fingerprint', s.tls && s.tls.fingerprint], ['TLS certificate until', s.tls && s.tls.notAfter],
      ]);
    } catch (e) { clear(status).append(h('p', { text: 'Cannot read the status: ' + explain(e) })); }
  }

  // The broker's figures come from /metrics (Prometheus text); rates are
  // the change of a counter between two reads.
  let lastDrops = null, last = null;
  async function loadMetrics() {
    try {
      const text = await request('GET', '/metrics', { accept: 'text/plain' });
      let clients, inflight, messages, deliveries, drops = {}, total = 0;
      for (const line of String(text).split('\n')) {
        if (line.startsWith('#')) continue;
        const m = line.match(/^(lmos_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$/);
        if (!m) continue;
        const v = Number(m[3]);
        if (m[1] === 'lmos_mqtt_clients') clients = v;
        else if (m[1] === 'lmos_mqtt_inflight') inflight = v;
        else if (m[1] === 'lmos_mqtt_messages_total') messages = v;
        else if (m[1] === 'lmos_mqtt_deliveries_total') deliveries = v;
        else if (m[1].endsWith('_dropped_total')) {
          const reason = m[1].replace(/^lmos_|_dropped_total$/g, '') + (m[2] ? ' ' + (m[2].match(/reason="([^"]*)"/) || [, ''])[1] : '');
          drops[reason.trim()] = v;
          total += v;
        }
      }
      const nonzero = Object.entries(drops).filter(([, v]) => v > 0).map(([k, v]) => k + ': ' + v).join(', ');
      const now = performance.now();
      const rate = (v, was) => last && v !== undefined && was !== undefined && now > last.at
        ? ((v - was) * 1000 / (now - last.at)).toFixed(1) : '…';
      const rates = [rate(messages, last && last.messages), rate(deliveries, last && last.deliveries)];
      last = { at: now, messages, deliveries };
      kv(broker, [['Clients', clients, 'broker-clients'], ['In flight', inflight],
        ['Messages/s', rates[0], 'broker-messages-rate'], ['Deliveries/s', rates[1], 'broker-deliveries-rate'],
        ['Drops', total ? nonzero : 'none', 'broker-drops'],
        ['Drops since last look', lastDrops === null ? '' : String(total - lastDrops)]]);
      lastDrops = total;
    } catch (e) { clear(broker).append(h('p', { text: 'Cannot read the metrics: ' + explain(e) })); }
  }

  function mdnsText(m) {
    const parts = [m.state];
    if (m.name) parts.push('as "' + m.name + '"');
    if (m.host) parts.push(m.host);
    if (m.interfaces && m.interfaces.length) parts.push('on ' + m.interfaces.join(', '));
    if (m.state !== 'off') parts.push((m.seen || 0) + ' WoT services seen');
    if (m.error) parts.push(m.error);
    return parts.join(' · ');
  }

  async function loadTokens() {
    try {
      const list = await request('GET', '/api/tokens');
      clear(tokens).append(...list.map(t => h('tr', { testid: 'token-row', 'data-id': t.id },
        h('td', {}, h('div', { text: t.name }), h('div', { class: 'mono small muted', text: t.id })),
        h('td', { text: t.scope + (t.thing ? ' (for ' + t.thing + ')' : '') }),
        h('td', { class: 'small', text: ago(t.created) }),
        h('td', { class: 'small', text: t.expires || 'never' }),
        h('td', { testid: 'token-state', text: t.revoked ? 'revoked' : 'active' }),
        h('td', {}, t.revoked ? '' : h('button', { type: 'button', class: 'small danger', testid: 'token-revoke', text: 'Revoke',
          'aria-label': 'Revoke ' + t.name, on: { click: async () => {
            try { await change('DELETE', '/api/tokens/' + enc(t.id)); clearError(); loadTokens(); } catch (err) { showError(explain(err)); }
          } } })))));
      tokenInfo.textContent = list.length + ' tokens';
    } catch (e) {
      if (e.status === 401) {
        tokenInfo.replaceChildren('The tokens and the log need an admin token. ',
          h('button', { type: 'button', class: 'small', testid: 'token-ask', text: 'Enter token', on: { click: () => askToken() } }));
        return;
      }
      tokenInfo.textContent = 'Cannot list the tokens: ' + explain(e);
      if (e.status === 403) showError(explain(e));
    }
  }

  let tail = null;
  const addLine = logList(logEl, MAX_LOG);
  function tailLog() {
    if (tail) tail.close();
    clear(logEl);
    logNote.textContent = 'connecting…';
    const s = tail = stream('/api/log?level=' + enc(level.value), {
      onOpen: () => { logNote.textContent = 'live'; },
      onEvent: (ev, r) => {
        if (ev !== 'log' || !r || typeof r !== 'object') return;
        const attrs = Object.entries(r.attrs || {}).map(([k, v]) => k + '=' + v).join(' ');
        const t = new Date(r.time).toLocaleTimeString();
        addLine(`${t} ${r.level} ${r.msg} ${attrs}` + (r.skipped ? ` (${r.skipped} skipped)` : ''));
      },
    });
    s.done.then(() => { if (tail === s) logNote.textContent = 'ended'; }, e => { if (tail === s) logNote.textContent = 'not available: ' + explain(e); });
  }

  loadStatus();
  loadMetrics();
  const refreshLinks = linksView(linksEl);
  const unLinks = onHubEvent(name => { if (name === 'link') refreshLinks(); });
  loadTokens().then(() => { if (hasToken()) tailLog(); else logNote.textContent = 'The log needs an admin token.'; });
  const unToken = onToken(() => { loadTokens(); tailLog(); });
  const timer = setInterval(() => { loadStatus(); loadMetrics(); refreshLinks(); }, 5000);
  return () => { clearInterval(timer); unToken(); unLinks(); if (tail) tail.close(); };
}
