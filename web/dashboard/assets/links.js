// The hub's links beyond itself (/api/status links: remote registry sync,
// pulls, the MQTT bridge, paired hubs) and the federation's pairing:
// paired peers (/api/peers) and the hubs mDNS proposes
// (/api/peers/candidates), which only an admin pairs.
import { h, clear, ago } from './dom.js';
import { get, change, enc, explain, showError, clearError, hasToken } from './api.js';

// linksView fills el with the links table and the peers; it returns
// refresh, which the hub page calls on its timer and on link events.
export function linksView(el) {
  const rows = h('tbody', { testid: 'links' });
  const peers = h('tbody', { testid: 'peers' });
  const candidates = h('tbody', { testid: 'peer-candidates' });
  const peerNote = h('p', { class: 'muted small', 'aria-live': 'polite' });
  const url = h('input', { id: 'peer-url', testid: 'peer-url', autocomplete: 'off', placeholder: 'hub-2.local:8080' });
  const did = h('input', { id: 'peer-did', testid: 'peer-did', autocomplete: 'off', placeholder: 'did:key:z6Mk…' });
  const form = h('form', { class: 'row', novalidate: true },
    h('span', { class: 'field' }, h('label', { for: 'peer-url', text: 'Hub URL' }), url),
    h('span', { class: 'field' }, h('label', { for: 'peer-did', text: 'Its DID' }), did),
    h('button', { type: 'submit', testid: 'peer-add', text: 'Pair' }));
  // An address without a scheme is taken with this page's (http or https).
  form.addEventListener('submit', e => {
    e.preventDefault();
    const u = url.value.trim();
    pair(u.includes('://') ? u : location.protocol + '//' + u, did.value.trim());
  });
  const table = (heads, body) => h('div', { class: 'scroll' }, h('table', {},
    h('thead', {}, h('tr', {}, heads.map(t => h('th', { scope: 'col', text: t })))), body));
  el.append(
    h('h2', { text: 'Links' }),
    table(['Kind', 'Name', 'State', 'Outbox', 'Lag', 'Things', 'Last success', 'Last error'], rows),
    h('h2', { text: 'Paired hubs' }), peerNote,
    table(['Hub', 'DID', 'State', ''], peers),
    h('h3', { text: 'Hubs seen on the LAN' }),
    h('p', { class: 'muted small', text: 'mDNS only proposes hubs: pair one here, and pair this hub on the other one too.' }),
    table(['Name', 'URL', 'DID', 'Last seen', ''], candidates),
    form);

  async function pair(u, d) {
    try {
      await change('POST', '/api/peers', { body: { url: u, did: d } });
      clearError();
      url.value = ''; did.value = '';
      refresh();
    } catch (err) { showError(explain(err)); }
  }

  function linkRows(links) {
    clear(rows).append(...(links.length ? links.map(l => h('tr', { testid: 'link-row', 'data-kind': l.kind, 'data-name': l.name },
      h('td', { text: l.kind }),
      h('td', { class: 'mono small', text: l.url && l.url !== l.name ? l.name + ' (' + l.url + ')' : l.name }),
      h('td', { testid: 'link-state', text: l.state }),
      h('td', { testid: 'link-outbox', text: String(l.outbox || 0) }),
      h('td', { text: l.lagSeconds ? l.lagSeconds.toFixed(1) + ' s' : '—' }),
      h('td', { text: String(l.things || 0) }),
      h('td', { class: 'small', text: l.lastSuccess ? ago(l.lastSuccess) : 'never' }),
      h('td', { testid: 'link-error', class: 'small', text: l.lastError ? l.lastError + (l.lastErrorAt ? ' (' + ago(l.lastErrorAt) + ')' : '') : '' })))
      : [h('tr', {}, h('td', { colspan: 8, class: 'muted', text: 'No sync, bridge or peer is configured.' }))]));
  }

  async function loadPeers() {
    try {
      const list = await get('/api/peers', { prompt: false });
      clear(peers).append(...(Array.isArray(list) ? list : []).map(p => h('tr', { testid: 'peer-row', 'data-did': p.did },
        h('td', { class: 'mono small', text: p.url }),
        h('td', { class: 'mono small', text: p.did }),
        h('td', { testid: 'peer-state', text: (p.link && p.link.state) || '—' }),
        h('td', {}, h('button', { type: 'button', class: 'small danger', testid: 'peer-remove', text: 'Unpair',
          'aria-label': 'Unpair ' + p.url, on: { click: async () => {
            try { await change('DELETE', '/api/peers/' + enc(p.did)); clearError(); refresh(); } catch (err) { showError(explain(err)); }
          } } })))));
      peerNote.textContent = Array.isArray(list) && list.length ? '' : 'No hub is paired.';
    } catch (e) {
      clear(peers);
      peerNote.textContent = 'Cannot list the paired hubs: ' + explain(e);
    }
    if (!hasToken()) {
      clear(candidates).append(h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'The hubs seen on the LAN are shown with an admin token.' })));
      return;
    }
    try {
      const got = await get('/api/peers/candidates', { prompt: false });
      const list = got && Array.isArray(got.candidates) ? got.candidates : [];
      clear(candidates).append(...(list.length ? list.map(c => h('tr', { testid: 'candidate-row', 'data-url': c.url },
        h('td', { text: c.name || '' }),
        h('td', { class: 'mono small', text: c.url }),
        h('td', { class: 'mono small', text: c.did || 'unknown' }),
        h('td', { class: 'small', text: c.lastSeen ? ago(c.lastSeen) : '' }),
        h('td', {}, c.paired ? h('span', { class: 'muted small', text: 'paired' })
          : h('button', { type: 'button', class: 'small', testid: 'candidate-pair', text: 'Pair', 'aria-label': 'Pair ' + (c.name || c.url),
            disabled: !c.did, on: { click: () => pair(c.url, c.did) } }))))
        : [h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'No other hub seen (mDNS off, or none on this LAN).' }))]));
    } catch (e) {
      const why = e.status === 401 || e.status === 403 ? 'the hubs seen on the LAN are shown with an admin token' : 'cannot list the hubs seen: ' + explain(e);
      clear(candidates).append(h('tr', {}, h('td', { colspan: 5, class: 'muted', text: why })));
    }
  }

  async function refresh() {
    try {
      const s = await get('/api/status', { prompt: false });
      const links = Array.isArray(s.links) ? s.links : [];
      linkRows(links);
      await loadPeers();
    } catch (e) { clear(rows).append(h('tr', {}, h('td', { colspan: 8, text: 'Cannot read the links: ' + explain(e) }))); }
  }
  refresh();
  return refresh;
}
