// The real fs, plus a globSync that refuses (see register.mjs).
import fs from 'node:fs';

export * from 'node:fs';
export default fs;
export function globSync() {
	throw new Error('fs.globSync needs Node 22: the conformance tier-check is not run here');
}
