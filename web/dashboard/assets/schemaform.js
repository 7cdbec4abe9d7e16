// Forms generated from TD data schemas (TD 1.1 §5.3.2): enum → select,
// numbers with min/max/step, booleans, strings with format and pattern,
// nested objects (fieldsets) and arrays (items added and removed), and a
// JSON editor for anything else. Inputs are named after the schema's
// members ("a.b" when nested, "a.0" for array items); each field has a
// field-error element for the checks made here and the hub's field errors.
import { h } from './dom.js';

let seq = 0;

// fieldOf builds the field for schema at name (path: member names);
// returns {node, read(errs) → value | undefined, errorAt(path)}.
function fieldOf(schema, name, label, required, errAt) {
  schema = schema && typeof schema === 'object' ? schema : {};
  const id = 'sf' + (++seq);
  const err = h('div', { testid: 'field-error', class: 'field-error', id: id + '-err', 'aria-live': 'polite' });
  errAt.set(name, err);
  const describe = schema.description ? h('div', { class: 'muted small', text: schema.description }) : null;
  const labelText = (label || 'value') + (required ? ' *' : '') + (schema.unit ? ` (${schema.unit})` : '');
  const lab = h('label', { for: id, text: labelText });
  const attrs = { id, name, 'aria-describedby': id + '-err', required: !!required };
  // fail records an error and returns the value as read (sent as it is
  // when the form is sent unchecked).
  const fail = (errs, msg, v) => { errs.push([name, msg]); return v; };

  if (Array.isArray(schema.enum)) {
    const opts = schema.enum;
    const sel = h('select', attrs,
      required ? null : h('option', { value: '', text: '—' }),
      opts.map((v, i) => h('option', { value: String(i), text: typeof v === 'string' ? v : JSON.stringify(v) })));
    return {
      node: h('div', { class: 'form-field' }, lab, sel, describe, err),
      read: errs => sel.value === '' ? (required ? fail(errs, 'choose a value') : undefined) : opts[Number(sel.value)],
    };
  }
  const type = Array.isArray(schema.type) ? null : schema.type;
  if (type === 'boolean') {
    const box = h('input', Object.assign({}, attrs, { type: 'checkbox', required: false, checked: schema.default === true }));
    return { node: h('div', { class: 'form-field check' }, box, lab, describe, err), read: () => box.checked };
  }
  if (type === 'number' || type === 'integer') {
    const step = schema.multipleOf ?? (type === 'integer' ? 1 : 'any');
    const inp = h('input', Object.assign({}, attrs, { type: 'number', inputmode: type === 'integer' ? 'numeric' : 'decimal',
      min: schema.minimum ?? null, max: schema.maximum ?? null, step, value: schema.default ?? null }));
    return {
      node: h('div', { class: 'form-field' }, lab, inp, describe, err),
      read: errs => {
        const s = inp.value.trim();
        if (s === '') return required ? fail(errs, 'a number is required') : undefined;
        const n = Number(s);
        if (!isFinite(n)) return fail(errs, 'not a number');
        if (type === 'integer' && !Number.isInteger(n)) return fail(errs, 'must be a whole number', n);
        if (schema.minimum !== undefined && n < schema.minimum) return fail(errs, `must be at least ${schema.minimum}`, n);
        if (schema.maximum !== undefined && n > schema.maximum) return fail(errs, `must be at most ${schema.maximum}`, n);
        if (schema.exclusiveMinimum !== undefined && n <= schema.exclusiveMinimum) return fail(errs, `must be more than ${schema.exclusiveMinimum}`, n);
        if (schema.exclusiveMaximum !== undefined && n >= schema.exclusiveMaximum) return fail(errs, `must be less than ${schema.exclusiveMaximum}`, n);
        return n;
      },
    };
  }
  if (type === 'string') {
    const long = (schema.maxLength ?? 0) > 200 || schema.contentMediaType;
    const kind = { email: 'email', uri: 'url', date: 'date', time: 'time' }[schema.format] || 'text';
    const inp = long ? h('textarea', Object.assign({}, attrs, { rows: 3 }))
      : h('input', Object.assign({}, attrs, { type: kind, autocomplete: 'off', maxlength: schema.maxLength ?? null, placeholder: schema.format || null }));
    if (schema.default !== undefined) inp.value = String(schema.default);
    let re = null;
    try { if (typeof schema.pattern === 'string') re = new RegExp(schema.pattern, 'u'); } catch { re = null; }
    return {
      node: h('div', { class: 'form-field' }, lab, inp, describe, schema.pattern ? h('div', { class: 'muted small', text: 'pattern: ' + schema.pattern }) : null, err),
      read: errs => {
        const s = inp.value;
        if (s === '') return required ? fail(errs, 'required') : undefined;
        if (schema.minLength !== undefined && [...s].length < schema.minLength) return fail(errs, `at least ${schema.minLength} characters`, s);
        if (schema.maxLength !== undefined && [...s].length > schema.maxLength) return fail(errs, `at most ${schema.maxLength} characters`, s);
        if (re && !re.test(s)) return fail(errs, 'does not match the pattern ' + schema.pattern, s);
        return s;
      },
    };
  }
  if (type === 'object' && schema.properties && typeof schema.properties === 'object') {
    const req = new Set(Array.isArray(schema.required) ? schema.required : []);
    const kids = Object.entries(schema.properties).map(([k, s]) => [k, fieldOf(s, name ? name + '.' + k : k, k, req.has(k), errAt)]);
    const body = kids.map(([, f]) => f.node);
    const node = name ? h('fieldset', {}, h('legend', { text: labelText }), describe, body, err) : h('div', {}, body, err);
    return {
      node,
      read: errs => {
        const out = {};
        for (const [k, f] of kids) {
          const v = f.read(errs);
          if (v !== undefined) out[k] = v;
        }
        return out;
      },
    };
  }
  if (type === 'array' && schema.items && !Array.isArray(schema.items)) {
    const list = h('div');
    const items = [];
    const add = () => {
      const i = items.length;
      const f = fieldOf(schema.items, name + '.' + i, (label || 'item') + ' ' + (i + 1), true, errAt);
      const wrap = h('div', { class: 'card' }, f.node);
      const entry = { f, wrap };
      wrap.append(h('button', { type: 'button', class: 'small', text: 'Remove', on: { click: () => { items.splice(items.indexOf(entry), 1); wrap.remove(); } } }));
      items.push(entry);
      list.append(wrap);
    };
    return {
      node: h('fieldset', {}, h('legend', { text: labelText }), describe, list,
        h('button', { type: 'button', class: 'small', text: 'Add item', on: { click: add } }), err),
      read: errs => {
        const out = items.map(e => e.f.read(errs));
        if (schema.minItems !== undefined && out.length < schema.minItems) return fail(errs, `at least ${schema.minItems} items`);
        if (schema.maxItems !== undefined && out.length > schema.maxItems) return fail(errs, `at most ${schema.maxItems} items`);
        if (!out.length && !required) return undefined;
        return out;
      },
    };
  }
  // Anything else: a JSON editor.
  const ta = h('textarea', Object.assign({}, attrs, { rows: 4, spellcheck: 'false', class: 'mono', placeholder: 'JSON' }));
  if (schema.default !== undefined) ta.value = JSON.stringify(schema.default, null, 2);
  return {
    node: h('div', { class: 'form-field' }, lab, ta, describe, err),
    read: errs => {
      if (ta.value.trim() === '') return required ? fail(errs, 'required') : undefined;
      try { return JSON.parse(ta.value); } catch (e) { return fail(errs, 'not valid JSON: ' + e.message); }
    },
  };
}

// schemaForm builds the fields of schema; read() returns {ok, value}
// and shows the errors at their fields; showHubErrors puts the hub's
// validationErrors (JSON pointers) at theirs.
export function schemaForm(schema) {
  const errAt = new Map();
  const isObj = schema && schema.type === 'object' && schema.properties;
  const root = fieldOf(schema, isObj ? '' : 'value', isObj ? '' : 'value', !isObj, errAt);
  const clearErrors = () => { for (const e of errAt.values()) e.textContent = ''; };
  const put = (name, msg) => {
    const e = errAt.get(name) || errAt.get('');
    if (e) e.textContent = (e.textContent ? e.textContent + '; ' : '') + msg;
    return !!e;
  };
  return {
    node: root.node,
    read() {
      clearErrors();
      const errs = [];
      const value = root.read(errs);
      for (const [n, m] of errs) put(n, m);
      return { ok: errs.length === 0, value: value === undefined && isObj ? {} : value };
    },
    clearErrors,
    // showHubErrors maps each field error's JSON pointer to its input
    // ("/a/b" → "a.b"; the root to the form's first error element).
    showHubErrors(fields) {
      let shown = 0;
      for (const f of fields || []) {
        const path = String(f.field || '').replace(/^\//, '').split('/').map(s => s.replace(/~1/g, '/').replace(/~0/g, '~')).join('.');
        const name = isObj ? path : (path ? 'value.' + path : 'value');
        if (put(errAt.has(name) ? name : (isObj ? '' : 'value'), f.description || 'invalid')) shown++;
      }
      return shown;
    },
  };
}
