// graphql-http's conformance audit of the service's /query (API_URL),
// with a user's bearer token (TOKEN) on every request: prints every
// result and exits non-zero on any MUST or SHOULD audit that is not ok,
// naming them.
import { auditServer } from 'graphql-http';

const url = process.env.API_URL;
const token = process.env.TOKEN;
if (!url || !token) {
  console.error('missing API_URL or TOKEN');
  process.exit(2);
}

const fetchFn = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};

const results = await auditServer({ url, fetchFn });
const failed = [];
for (const r of results) {
  const level = r.name.split(' ')[0];
  const bad = r.status !== 'ok' && (level === 'MUST' || level === 'SHOULD');
  if (bad) failed.push(r);
  console.log(`${r.status === 'ok' ? 'ok  ' : bad ? 'FAIL' : r.status.padEnd(4)} ${r.id} ${r.name}${r.status === 'ok' ? '' : `: ${r.reason}`}`);
}
const count = (level) => results.filter((r) => r.name.startsWith(level + ' ')).length;
console.log(`audit: ${results.length} audits (${count('MUST')} MUST, ${count('SHOULD')} SHOULD, ${count('MAY')} MAY), ${failed.length} MUST/SHOULD failed`);
if (failed.length > 0) {
  for (const r of failed) console.log(`audit: failed ${r.id} ${r.name}`);
  process.exit(1);
}
