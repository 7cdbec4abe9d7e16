// A Thing's page: its description for a person, the raw TD, properties
// with live values and write forms, actions with generated forms (partial
// results streamed, then the final one), event logs, a chat box for a
// conversational agent, its groups, binding and recent activity.
import { h, append, clear, ago, shortDID, copyButton, logList } from './dom.js';
import { store, subscribe, onHubEvent, record, originText } from './store.js';
import { get, request, stream, enc, explain, showError, ProblemError } from './api.js';
import { schemaForm } from './schemaform.js';

// A browser opens six HTTP/1.1 connections to one host; the feed holds
// one, so a page watches at most this many values at once (more on
// request) and leaves room for its requests.
const MAX_STREAMS = 3;
const MAX_LOG = 100;

const pretty = v => v === undefined ? '' : typeof v === 'string' ? v : JSON.stringify(v, null, 2);
const str = v => typeof v === 'string' ? v : '';
const time = () => new Date().toLocaleTimeString();

export function thingView(root, id) {
  const base = '/proxy/' + enc(id);
  const streams = new Set();
  let closed = false;
  const cleanups = [];
  const open = (path, opts) => {
    const s = stream(path, opts);
    streams.add(s);
    s.done.finally(() => streams.delete(s)).catch(() => {});
    return s;
  };

  append(root, h('p', { class: 'muted', text: 'Loading…' }));
  get('/things/' + enc(id)).then(td => { if (!closed) render(td); }, e => {
    clear(root).append(h('h1', { testid: 'thing-title', text: id }), h('p', { text: 'Cannot load this Thing: ' + explain(e) }));
  });

  function render(td) {
    const r = record(td);
    clear(root);
    const presence = h('span');
    const showPresence = () => {
      const cur = store.things.get(id) || r;
      const st = cur.presence.status || 'unknown';
      presence.replaceChildren(h('span', { class: 'badge ' + st, testid: 'thing-presence', text: st }),
        cur.presence.since ? h('span', { class: 'muted small', text: (st === 'online' ? ' since ' : ' last seen ') + ago(cur.presence.since) }) : '',
        cur.presence.via ? h('span', { class: 'muted small', text: ' via ' + cur.presence.via }) : '');
    };
    showPresence();
    const groups = h('dd');
    const showGroups = () => {
      const gs = store.memberOf.get(id) || [];
      groups.replaceChildren(...(gs.length ? gs.flatMap((g, i) => [i ? ', ' : '', h('a', { href: '#/group/' + enc(g), text: g })]) : ['—']));
    };
    showGroups();
    cleanups.push(subscribe(() => { showPresence(); showGroups(); }));

    const meta = td['lmos:metadata'] || {};
    const vendor = meta['lmos:vendor'] && str(meta['lmos:vendor']['lmos:name']);
    const version = td.version && str(td.version.instance);
    // The binding is read when asked for: most Things have none, and
    // its absence is a 404.
    const binding = h('dd', {}, h('button', { type: 'button', class: 'small', text: 'Show', on: { click: () => {
      get('/api/things/' + enc(id) + '/binding').then(b => binding.replaceChildren(h('span', { class: 'mono', title: b.did, text: shortDID(b.did) }), ' since ' + b.since),
        e => { binding.textContent = e.status === 404 ? 'none' : explain(e); });
    } } }));
    // Values are read and watched at once only while the Thing is
    // online (an offline one answers 503); the buttons do it on demand.
    const online = (store.things.get(id) || r).presence.status === 'online';

    const signed = td.proof ? (r.verified ? 'signed, verified' : 'signed, not verified by the hub') : 'unsigned';
    append(root, 
      h('p', { class: 'small' }, h('a', { href: '#/', text: '‹ All Things' })),
      h('h1', { testid: 'thing-title', text: r.title }),
      str(td.description) ? h('p', { testid: 'thing-description', text: td.description }) : null,
      h('dl', { class: 'kv' },
        h('dt', { text: 'Id' }), h('dd', {}, h('span', { class: 'mono', text: id }), ' ', copyButton(id)),
        h('dt', { text: 'Type' }), h('dd', { text: r.kind }),
        h('dt', { text: 'Presence' }), h('dd', {}, presence),
        h('dt', { text: 'Origin' }), h('dd', { testid: 'thing-origin', text: originText(r) }),
        h('dt', { text: 'Verified' }), h('dd', {}, r.verified ? [h('span', { class: 'mono', title: r.verified, text: shortDID(r.verified) }), ' ', copyButton(r.verified)] : '—'),
        h('dt', { text: 'Binding (key)' }), binding,
        h('dt', { text: 'Groups' }), groups,
        vendor ? [h('dt', { text: 'Vendor' }), h('dd', { text: vendor })] : null,
        version ? [h('dt', { text: 'Version' }), h('dd', { text: version })] : null),
      capabilities(r.caps),
      h('details', {},
        h('summary', { text: 'Thing Description (' + signed + ')' }),
        h('div', { class: 'row' }, copyButton(JSON.stringify(td, null, 2), 'Copy TD')),
        h('pre', { testid: 'td-raw', text: JSON.stringify(td, null, 2) })));

    let budget = MAX_STREAMS;
    const props = Object.entries(td.properties || {});
    if (props.length) append(root, h('h2', { text: 'Properties' }), props.map(([n, p]) => property(n, p || {})));
    const actions = Object.entries(td.actions || {});
    if (actions.length) append(root, h('h2', { text: 'Actions' }), actions.map(([n, a]) => action(n, a || {})));
    const events = Object.entries(td.events || {});
    if (events.length) append(root, h('h2', { text: 'Events' }), events.map(([n, e]) => eventLog(n, e || {})));
    append(root, activity());

    function property(name, p) {
      const value = h('pre', { testid: 'prop-value-' + name, 'aria-live': 'polite', text: '…' });
      const note = h('span', { class: 'muted small' });
      // The latest observed value is shown once a frame, however fast
      // values come.
      let latest, pending = false;
      const show = v => {
        latest = v;
        if (pending) return;
        pending = true;
        requestAnimationFrame(() => { pending = false; value.textContent = pretty(latest); note.textContent = 'live · ' + time(); });
      };
      const read = async () => {
        try { value.textContent = pretty(await get(base + '/properties/' + enc(name))); note.textContent = 'read ' + time(); }
        catch (e) { value.textContent = '—'; note.textContent = explain(e); }
      };
      const watch = () => {
        budget--;
        watchBtn.hidden = true;
        note.textContent = 'live';
        const s = open(base + '/properties/' + enc(name), {
          onEvent: (ev, data) => { if (ev === name) show(data); },
        });
        s.done.then(() => { note.textContent = 'observation ended'; }, e => { note.textContent = 'not observed: ' + explain(e); })
          .finally(() => { budget++; if (!closed) watchBtn.hidden = false; });
      };
      const watchBtn = h('button', { type: 'button', class: 'small', text: 'Watch', hidden: !p.observable, on: { click: watch } });
      const card = h('section', { class: 'card', testid: 'prop-' + name },
        h('h3', { text: str(p.title) || name }),
        str(p.description) ? h('p', { class: 'muted small', text: p.description }) : null,
        value,
        h('div', { class: 'row' }, p.writeOnly ? null : h('button', { type: 'button', class: 'small', text: 'Read', on: { click: read } }), watchBtn, note));
      // An observed property gets its retained value from the observation:
      // no read beside it (which is 503 while the agent has published none).
      if (p.observable && budget > 0 && online) { value.textContent = '—'; watch(); }
      else if (!p.writeOnly && online) read();
      else if (!online) { value.textContent = '—'; note.textContent = 'offline'; }
      if (!p.readOnly) {
        const schema = Object.assign({}, p);
        delete schema.forms;
        const f = schemaForm(schema);
        const status = h('span', { class: 'muted small', 'aria-live': 'polite' });
        const form = h('form', { testid: 'prop-form-' + name, novalidate: true }, f.node,
          h('div', { class: 'row' }, h('button', { type: 'submit', testid: 'prop-submit-' + name, text: 'Write' }), status));
        form.addEventListener('submit', async e => {
          e.preventDefault();
          const { ok, value: v } = f.read();
          if (!ok) { status.textContent = 'Check the fields.'; return; }
          status.textContent = 'Writing…';
          try {
            await request('PUT', base + '/properties/' + enc(name), { body: v });
            status.textContent = 'Written ' + time();
            if (!p.writeOnly) read();
          } catch (err) {
            status.textContent = explain(err);
            if (err instanceof ProblemError) {
              f.showHubErrors(err.problem.validationErrors);
              if (err.status === 401 || err.status === 403) showError(explain(err));
            }
          }
        });
        card.append(form);
      }
      return card;
    }

    function action(name, a) {
      const f = schemaForm(a.input || null);
      const partials = h('ol', { testid: 'action-partials-' + name, class: 'log', 'aria-live': 'polite' });
      const result = h('pre', { testid: 'action-result-' + name, 'aria-live': 'polite' });
      const status = h('span', { class: 'muted small', 'aria-live': 'polite' });
      const submit = h('button', { type: 'submit', testid: 'action-submit-' + name, text: 'Invoke' });
      // Sending unchecked shows what the hub itself refuses (its field
      // errors land at the fields too): for testing an agent's schema.
      const unchecked = h('input', { type: 'checkbox', id: 'unchecked-' + name, testid: 'action-unchecked-' + name });
      const form = h('form', { testid: 'action-form-' + name, novalidate: true },
        a.input ? f.node : h('p', { class: 'muted small', text: 'No input.' }),
        h('div', { class: 'row' }, submit, status),
        a.input ? h('div', { class: 'form-field check small' }, unchecked, h('label', { for: 'unchecked-' + name, text: 'Send without the form\'s checks (the hub checks anyway)' })) : null);
      let running = null;
      form.addEventListener('submit', async e => {
        e.preventDefault();
        const { ok, value: v } = a.input ? f.read() : { ok: true, value: undefined };
        if (!ok && !unchecked.checked) { status.textContent = 'Check the fields: nothing was sent.'; return; }
        if (!ok) f.clearErrors(); // the hub's own errors take their place
        if (running) running.close();
        clear(partials);
        result.textContent = '';
        result.className = '';
        status.textContent = 'Invoking…';
        submit.disabled = true;
        let final = false;
        const s = running = open(base + '/actions/' + enc(name), {
          method: 'POST', ask: true, body: v === undefined ? undefined : JSON.stringify(v),
          onEvent: (ev, data) => {
            if (ev === 'pending') { status.textContent = 'Pending…'; return; }
            if (ev === 'running') {
              status.textContent = 'Running…';
              if (data !== '' && data !== undefined) partials.append(h('li', { text: pretty(data) }));
              return;
            }
            final = true;
            if (ev === 'completed') {
              result.textContent = data === '' ? '(no output)' : pretty(data);
              status.textContent = 'Completed ' + time();
            } else {
              failed(data && typeof data === 'object' ? new ProblemError(data.status || 502, data) : new Error(String(data)));
            }
          },
        });
        const failed = err => {
          result.className = 'field-error';
          result.textContent = explain(err);
          status.textContent = 'Failed';
          if (err instanceof ProblemError) {
            f.showHubErrors(err.problem.validationErrors);
            if (err.status === 401 || err.status === 403) showError(explain(err));
          }
        };
        try {
          await s.done;
          if (!final && running === s) status.textContent = 'The stream ended without a result.';
        } catch (err) {
          if (running === s && !closed) failed(err);
        } finally {
          if (running === s) { submit.disabled = false; running = null; }
        }
      });
      const card = h('section', { class: 'card', testid: 'action-' + name },
        h('h3', { text: str(a.title) || name }),
        str(a.description) ? h('p', { class: 'muted small', text: a.description }) : null,
        isChat(a) ? chat(name) : null,
        h('details', { open: true }, h('summary', { text: 'Form' }), form,
          h('h4', { class: 'small muted', text: 'Partial results' }), partials,
          h('h4', { class: 'small muted', text: 'Result' }), result));
      return card;
    }

    // A conversational agent (LMOS chat: input {messages: [{role,
    // content}]}) gets a chat box over the same streamed invocation.
    function chat(name) {
      const log = h('div', { class: 'chat', testid: 'chat-log-' + name, 'aria-live': 'polite' });
      const input = h('input', { type: 'text', id: 'chat-' + name, testid: 'chat-input-' + name, autocomplete: 'off' });
      const messages = [];
      const form = h('form', { class: 'row', testid: 'chat-form-' + name, novalidate: true },
        h('label', { for: 'chat-' + name, text: 'Message' }), input, h('button', { type: 'submit', text: 'Send' }));
      form.addEventListener('submit', async e => {
        e.preventDefault();
        const text = input.value.trim();
        if (!text) return;
        input.value = '';
        messages.push({ role: 'user', content: text });
        log.append(h('p', { class: 'user', text: text }));
        const reply = h('p', { class: 'muted', text: '…' });
        log.append(reply);
        try {
          const s = open(base + '/actions/' + enc(name), {
            method: 'POST', ask: true, body: JSON.stringify({ messages }),
            onEvent: (ev, data) => {
              const out = data && Array.isArray(data.messages) ? data.messages.map(m => str(m && m.content)).join('\n') : pretty(data);
              if (ev === 'running' && out) reply.textContent = out;
              if (ev === 'completed') {
                reply.className = '';
                reply.textContent = out;
                messages.push({ role: 'assistant', content: out });
              }
              if (ev === 'failed') reply.textContent = explain(new ProblemError(data && data.status || 502, data));
            },
          });
          await s.done;
        } catch (err) { reply.textContent = explain(err); }
        log.scrollTop = log.scrollHeight;
      });
      return h('div', {}, log, form);
    }

    function eventLog(name, ev) {
      const log = h('ol', { testid: 'event-log-' + name, class: 'log', reversed: true, 'aria-live': 'polite' });
      const add = logList(log, MAX_LOG);
      const note = h('span', { class: 'muted small' });
      const watch = () => {
        budget--;
        btn.hidden = true;
        note.textContent = 'listening';
        const s = open(base + '/events/' + enc(name), {
          onEvent: (n, data) => {
            if (n !== name) return;
            add(time() + '  ' + pretty(data));
          },
        });
        s.done.then(() => { note.textContent = 'subscription ended'; }, e => { note.textContent = 'not subscribed: ' + explain(e); })
          .finally(() => { budget++; if (!closed) btn.hidden = false; });
      };
      const btn = h('button', { type: 'button', class: 'small', text: 'Listen', on: { click: watch } });
      const card = h('section', { class: 'card', testid: 'event-' + name },
        h('h3', { text: str(ev.title) || name }),
        str(ev.description) ? h('p', { class: 'muted small', text: ev.description }) : null,
        h('div', { class: 'row' }, btn, note), log);
      if (budget > 0 && online) watch();
      return card;
    }

    function activity() {
      const log = h('ol', { class: 'log', reversed: true, testid: 'thing-activity' });
      const add = logList(log, MAX_LOG);
      cleanups.push(onHubEvent((name, d) => {
        if (d.id !== id && !(d.group && d.group.member === id)) return;
        if (name === 'thing_deleted') showError('This Thing was deleted from the directory.');
        const what = name === 'presence' && d.presence ? 'presence ' + d.presence.status : name === 'group' && d.group ? d.group.action + ' ' + d.group.group : name;
        add(time() + '  ' + what);
      }));
      return h('section', {}, h('h2', { text: 'Recent activity' }), h('p', { class: 'muted small', text: 'Changes seen since this page opened.' }), log);
    }
  }

  return () => {
    closed = true;
    for (const s of streams) s.close();
    for (const c of cleanups) c();
  };
}

function isChat(a) {
  const p = a.input && a.input.properties;
  return !!(p && p.messages && p.messages.type === 'array');
}

function capabilities(caps) {
  if (!caps.length) return null;
  return h('section', {}, h('h2', { text: 'Capabilities' }), h('ul', {}, caps.map(c => {
    c = c && typeof c === 'object' ? c : {};
    const ex = Array.isArray(c.examples) ? c.examples : [];
    return h('li', {},
      h('strong', { text: str(c.name) || str(c.id) }), str(c.version) ? ' ' + c.version : '',
      str(c.description) ? h('div', { text: c.description }) : null,
      ex.length ? h('ul', { class: 'muted small' }, ex.map(x => h('li', { text: '“' + String(x) + '”' }))) : null);
  })));
}
