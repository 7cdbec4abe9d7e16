// Module resolve hook (see register.mjs): "fs" imported by the conformance dist resolves to
// fs.mjs when this Node's fs lacks globSync; every other import is left alone.
import fs from 'node:fs';

const shim = new URL('./fs.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && typeof fs.globSync !== 'function' &&
      context.parentURL?.includes('/@modelcontextprotocol/conformance/dist/')) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
