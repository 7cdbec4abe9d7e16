// Preload for `node --import ./register.mjs <conformance>/dist/index.js ...` so the pinned
// @modelcontextprotocol/conformance (built for Node >= 22) runs on Debian bookworm's Node 18
// and on Node 20:
//   * its dist imports `globSync` from "fs" at top level (Node >= 22, used only by its
//     tier-check command): hooks.mjs hands the conformance dist a "fs" that has one;
//   * its undici 7 reads the global `File` at load (global only from Node 20).
// Needs module.register (Node >= 18.19 / 20.6). A newer Node leaves both untouched.
import { register } from 'node:module';
import { File } from 'node:buffer';

if (typeof globalThis.File === 'undefined') globalThis.File = File;
register('./hooks.mjs', import.meta.url);
