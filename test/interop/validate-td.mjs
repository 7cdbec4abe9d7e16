#!/usr/bin/env node
// validate-td.mjs — validate W3C WoT Thing Descriptions with the TD Playground core.
//
// Usage: node validate-td.mjs FILE...     ("-" reads one TD from standard input)
//
// For every FILE one JSON line is printed to stdout:
//   {"file": ..., "valid": bool, "report": {...}, "errors": [...], "warnings": [...], "details": {...}}
// "report" and "details" are the playground's own result objects (values null,
// "passed", "warning", "failed"; details may also hold e.g. "not-impl").
// A TD is valid when report.json and report.schema are "passed" and no other
// report entry is "failed" (report.additional fails e.g. when "security" names
// an undefined scheme). JSON-LD expansion is not checked (checkJsonLd: false:
// it would need to fetch the @context documents from the network).
//
// Exit code: 0 all files valid, 1 at least one invalid, 2 usage or I/O error.

import { readFile } from 'node:fs/promises';
import core from '@thing-description-playground/core';

const { tdValidator } = core;

const OPTIONS = Object.freeze({
  checkDefaults: true, // only ever yields "warning"; reported, does not affect validity
  checkJsonLd: false,
});

const USAGE = 'usage: node validate-td.mjs FILE...   ("-" reads a TD from standard input)\n';

// Anything the library (or its dependencies) prints must not end up on stdout,
// which carries exactly one JSON line per file.
for (const name of ['log', 'info', 'debug', 'warn']) {
  console[name] = (...args) => process.stderr.write(args.map(String).join(' ') + '\n');
}

function readInput(file) {
  if (file === '-') {
    return new Promise((resolve, reject) => {
      const chunks = [];
      process.stdin.on('data', (c) => chunks.push(c));
      process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      process.stdin.on('error', reject);
    });
  }
  return readFile(file, 'utf8');
}

function logText(msg) {
  if (msg instanceof Error) return msg.message || String(msg);
  if (typeof msg === 'string') return msg;
  try {
    return JSON.stringify(msg);
  } catch {
    return String(msg);
  }
}

// The playground logs a headline ("X JSON Schema validation failed:",
// "KO Error: Assertion: <id>", "Optional validation failed:", "! Warning: ...",
// "Assertion: <id>: <status> => ...") followed by continuation lines ("> ..."
// or the comment of a failed assertion). Fold them into entries.
function collect() {
  const entries = [];
  let expectComment = false;
  const log = (raw) => {
    const text = logText(raw).trim();
    if (text === '') return;
    const last = entries[entries.length - 1];
    if (last && (text.startsWith('> ') || expectComment || text.startsWith('Hint:'))) {
      const more = text.startsWith('> ') ? text.slice(2) : text;
      last.text = last.text.endsWith(':') ? `${last.text} ${more}` : `${last.text}: ${more}`;
      expectComment = false;
      return;
    }
    expectComment = false;
    if (text.startsWith('X ')) {
      entries.push({ level: 'error', text: text.slice(2) });
    } else if (text.startsWith('KO Error: ')) {
      entries.push({ level: 'error', text: text.slice('KO Error: '.length) });
      expectComment = true;
    } else if (/^Assertion: \S+: not-impl\b/.test(text)) {
      // Informational only (e.g. "td does not link to tm"): drop.
      entries.push({ level: 'info', text });
    } else if (last && last.level === 'error' && !/^(! |Optional |Assertion: )/.test(text)) {
      last.text = last.text.endsWith(':') ? `${last.text} ${text}` : `${last.text}: ${text}`;
    } else {
      entries.push({ level: 'warning', text: text.replace(/^! /, '') });
    }
  };
  return { log, entries };
}

async function validate(file) {
  const text = await readInput(file); // I/O errors propagate to the caller
  const { log, entries } = collect();
  let result;
  try {
    result = await tdValidator(text, log, { ...OPTIONS });
  } catch (err) {
    // tdValidator rejects only on bad arguments; treat like an invalid TD.
    result = { report: { json: null, schema: null, defaults: null, jsonld: null, additional: null }, details: {} };
    entries.push({ level: 'error', text: `validator rejected input: ${logText(err)}` });
  }
  const report = result.report || {};
  const valid =
    report.json === 'passed' &&
    report.schema === 'passed' &&
    !Object.values(report).includes('failed');
  const errors = entries.filter((e) => e.level === 'error').map((e) => e.text);
  const warnings = entries.filter((e) => e.level === 'warning').map((e) => e.text);
  if (!valid && errors.length === 0) {
    for (const [k, v] of Object.entries(report)) {
      if (v === 'failed' || (v === null && (k === 'json' || k === 'schema'))) {
        errors.push(`${k}: ${v === null ? 'not checked' : v}`);
      }
    }
  }
  return { file, valid, report, errors, warnings, details: result.details || {} };
}

function writeLine(obj) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(obj) + '\n', resolve));
}

async function main(argv) {
  const files = [];
  let opts = true;
  for (const a of argv) {
    if (opts && (a === '-h' || a === '--help')) {
      process.stdout.write(USAGE);
      return 0;
    }
    if (opts && a === '--') {
      opts = false;
      continue;
    }
    if (opts && a.startsWith('-') && a !== '-') {
      process.stderr.write(`validate-td: unknown option ${a}\n${USAGE}`);
      return 2;
    }
    files.push(a);
  }
  if (files.length === 0) {
    process.stderr.write(USAGE);
    return 2;
  }
  if (files.filter((f) => f === '-').length > 1) {
    process.stderr.write('validate-td: "-" (standard input) may be given only once\n');
    return 2;
  }

  let ioError = false;
  let invalid = false;
  for (const file of files) {
    let res;
    try {
      res = await validate(file);
    } catch (err) {
      ioError = true;
      process.stderr.write(`validate-td: ${file}: ${err && err.message ? err.message : err}\n`);
      continue;
    }
    if (!res.valid) invalid = true;
    await writeLine(res);
  }
  return ioError ? 2 : invalid ? 1 : 0;
}

// The playground keeps running its remaining checks after it has resolved
// (e.g. for unparsable JSON); never let such a late failure kill the process.
process.on('unhandledRejection', (err) => {
  process.stderr.write(`validate-td: ignored late validator error: ${logText(err)}\n`);
});

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`validate-td: ${err && err.stack ? err.stack : err}\n`);
    process.exit(2);
  },
);
