// Element building. Every piece of text goes in as a text node
// (textContent): nothing a Thing describes is ever parsed as HTML.

// h builds an element. attrs: class, testid, text, on (event handlers),
// and any other attribute (set with setAttribute; false/null skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'testid') el.dataset.testid = v;
    else if (k === 'text') el.textContent = String(v);
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

// marked returns text as nodes with every occurrence of the words wrapped
// in <mark> (case-insensitive); the text stays text.
export function marked(text, words) {
  text = String(text ?? '');
  if (!words || !words.length) return [text];
  const lower = text.toLowerCase();
  const out = [];
  let i = 0;
  while (i < text.length) {
    let best = -1, len = 0;
    for (const w of words) {
      const j = lower.indexOf(w, i);
      if (j >= 0 && (best < 0 || j < best || (j === best && w.length > len))) { best = j; len = w.length; }
    }
    if (best < 0) break;
    if (best > i) out.push(text.slice(i, best));
    out.push(h('mark', { text: text.slice(best, best + len) }));
    i = best + len;
  }
  if (i < text.length) out.push(text.slice(i));
  return out;
}

// ago says how long ago t (a time string) was, for a person.
export function ago(t, now = Date.now()) {
  const ms = now - Date.parse(t);
  if (!isFinite(ms)) return '';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 86400) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

// shortDID shows the start and end of a DID.
export function shortDID(did) {
  return did.length > 24 ? did.slice(0, 14) + '…' + did.slice(-6) : did;
}

// copyButton copies text to the clipboard.
export function copyButton(text, label = 'Copy') {
  const b = h('button', { type: 'button', class: 'small', 'aria-label': label + ' ' + text, text: label });
  b.addEventListener('click', async () => {
    try { await navigator.clipboard.writeText(text); b.textContent = 'Copied'; }
    catch { b.textContent = 'Select and copy'; }
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}

export function debounce(fn, ms) {
  let t;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}

// logList returns a function that adds a line to list (newest first,
// at most max kept); lines arriving faster than the screen refreshes are
// added together once a frame, so a burst of events does not freeze the
// page.
export function logList(list, max) {
  let queue = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    const lines = queue.slice(-max);
    queue = [];
    list.prepend(...lines.reverse().map(text => h('li', { text })));
    while (list.childElementCount > max) list.lastElementChild.remove();
  };
  return text => {
    queue.push(text);
    if (queue.length > max) queue.splice(0, queue.length - max);
    if (!scheduled) { scheduled = true; requestAnimationFrame(flush); }
  };
}
