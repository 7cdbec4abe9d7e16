// node:fs plus a globSync that says why it is missing (only the suite's tier-check calls it).
import fs from 'node:fs';

export * from 'node:fs';
export default fs;
export function globSync() {
  throw new Error(`fs.globSync needs Node >= 22 (this is ${process.version})`);
}
