// The hub's public HTTP API. The token lives in this module's memory only:
// never in a URL, localStorage or sessionStorage; a reload forgets it.
import { h } from './dom.js';

let token = '';
let asking = null;
const tokenListeners = new Set();

// onToken calls fn whenever a token is entered (a page then reads what
// it could not read before).
export function onToken(fn) { tokenListeners.add(fn); return () => tokenListeners.delete(fn); }

export function hasToken() { return token !== ''; }
export function forgetToken() { token = ''; }

// askToken shows the token dialog once; concurrent callers share it.
export function askToken(reason) {
  if (asking) return asking;
  const dlg = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  const why = document.getElementById('token-reason');
  why.textContent = reason || 'This needs a token of the hub (lmos-hub token create).';
  input.value = '';
  asking = new Promise(resolve => {
    const save = document.getElementById('token-form');
    const cancel = document.getElementById('token-cancel');
    const done = ok => {
      save.removeEventListener('submit', onSave);
      cancel.removeEventListener('click', onCancel);
      dlg.removeEventListener('cancel', onCancel);
      if (dlg.open) dlg.close();
      asking = null;
      resolve(ok);
    };
    const onSave = e => {
      e.preventDefault();
      const v = input.value.trim();
      if (!v) { input.focus(); return; }
      token = v;
      input.value = '';
      done(true);
      for (const fn of tokenListeners) setTimeout(fn, 0);
    };
    const onCancel = e => { e.preventDefault(); done(false); };
    save.addEventListener('submit', onSave);
    cancel.addEventListener('click', onCancel);
    dlg.addEventListener('cancel', onCancel);
    dlg.showModal();
    input.focus();
  });
  return asking;
}

// ProblemError is a refusal of the hub (RFC 9457 body in .problem).
export class ProblemError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || ('HTTP ' + status));
    this.status = status;
    this.problem = problem || {};
  }
}

export function showError(msg) {
  const b = document.getElementById('error-banner');
  b.replaceChildren(document.createTextNode(String(msg)),
    h('button', { type: 'button', class: 'small', text: 'Dismiss', on: { click: () => { b.hidden = true; } } }));
  b.hidden = false;
}

export function clearError() { document.getElementById('error-banner').hidden = true; }

// explain turns a refusal into a sentence for a person.
export function explain(err) {
  if (err instanceof ProblemError) {
    if (err.status === 401) return 'The hub refused the token (401): ' + err.message;
    if (err.status === 403) return 'This token may not do that (403 forbidden): ' + err.message;
    return err.message + ' (' + err.status + ')';
  }
  return String(err && err.message || err);
}

async function problemOf(res) {
  try { return await res.json(); } catch { return null; }
}

function headers(extra) {
  const hd = Object.assign({}, extra);
  if (token) hd.Authorization = 'Bearer ' + token;
  return hd;
}

// request sends one request, body (any JSON value) encoded as JSON. With
// needsToken (the hub API's changes,
// which always want one) the token is asked for first when none is held;
// any request the hub refuses with 401 while no token is held asks once
// and is sent again (a private hub's reads, a Thing that requires
// security, an admin page), unless prompt is false. A refused token is
// forgotten, so the next change asks again.
// With as 'blob' the answer is returned as a Blob (a backup's bytes).
export async function request(method, path, { body, type = 'application/json', accept = 'application/json', needsToken = false, prompt = true, as } = {}) {
  if (needsToken && !token && !(await askToken('Changing the hub needs a token with the right scope.'))) {
    throw new ProblemError(401, { detail: 'no token given' });
  }
  for (let attempt = 0; ; attempt++) {
    const init = { method, headers: headers({ Accept: accept }), cache: 'no-store' };
    if (body !== undefined) {
      init.body = JSON.stringify(body); // a string value is a JSON string too
      init.headers['Content-Type'] = type;
    }
    const res = await fetch(path, init);
    if (res.ok) {
      if (res.status === 204) return null;
      if (as === 'blob') return res.blob();
      const ct = res.headers.get('Content-Type') || '';
      return ct.includes('json') ? res.json() : res.text();
    }
    const p = await problemOf(res);
    if (res.status === 401 && attempt === 0 && !token && prompt) {
      if (await askToken(method === 'GET' ? 'This hub is private: reading it needs a token.' : 'The hub wants a token for this.')) continue;
    }
    if (res.status === 401) forgetToken();
    throw new ProblemError(res.status, p);
  }
}

// change is a request to the hub API that always needs a token.
export const change = (method, path, o = {}) => request(method, path, Object.assign({ needsToken: true }, o));

export const get = (path, o) => request('GET', path, o);

// stream reads server-sent events from a request (fetch, so the token goes
// in a header and POST works). onEvent(name, data, id) gets each event,
// data parsed as JSON when it parses; body is sent as given (JSON text).
// Returns {close, done}; done settles
// when the stream ends (rejects with a ProblemError when refused). With
// ask, a 401 while no token is held asks for one and tries again.
export function stream(path, { method = 'GET', body, onEvent, onOpen, lastId, ask = false } = {}) {
  const ctl = new AbortController();
  const done = (async () => {
    const hd = headers({ Accept: 'text/event-stream' });
    if (lastId) hd['Last-Event-ID'] = lastId;
    const init = { method, headers: hd, signal: ctl.signal, cache: 'no-store' };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      hd['Content-Type'] = 'application/json';
    }
    let res = await fetch(path, init);
    if (res.status === 401 && !token && ask && await askToken('The hub wants a token for this.')) {
      hd.Authorization = 'Bearer ' + token;
      res = await fetch(path, init);
    }
    if (!res.ok) {
      if (res.status === 401) forgetToken();
      throw new ProblemError(res.status, await problemOf(res));
    }
    if (onOpen) onOpen();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '', name = '', data = [], id = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) {
            const text = data.join('\n');
            let v = text;
            try { v = JSON.parse(text); } catch { /* not JSON: the text */ }
            onEvent(name || 'message', v, id);
          }
          name = ''; data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') name = val;
        else if (field === 'data') data.push(val);
        else if (field === 'id') id = val;
      }
    }
  })();
  done.catch(() => {});
  return { close: () => ctl.abort(), done };
}

export const enc = encodeURIComponent;
