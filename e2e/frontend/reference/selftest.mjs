// Runs every check of this folder against the stand-in in server.mjs,
// which does what they ask: they must all pass there (and fail against a
// service that does not), or a check is wrong rather than the service.
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('..', import.meta.url));
// pagePort is a free loopback port below the ephemeral range, for the
// allowed page's origin, which the stand-in is told before the page is
// served: no connection made meanwhile takes it as its local port.
const pagePort = async () => {
  const low = Number((await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').catch(() => '32768')).split(/\s+/)[0]) || 32768;
  for (let i = 0; i < 100; i++) {
    const port = 10000 + Math.floor(Math.random() * (low - 10000));
    const s = createServer();
    const ok = await new Promise((resolve) => {
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (ok) {
      await new Promise((r) => s.close(r));
      return port;
    }
  }
  throw new Error('no free loopback port below the ephemeral range');
};
const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
const now = Math.floor(Date.now() / 1000);
const token = (sub, exp = now + 3600) => `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub: String(sub), role: 'user', exp })}.unsigned`;

const allowedPort = await pagePort();
const server = spawn(process.execPath, ['reference/server.mjs'], {
  cwd: dir, env: { ...process.env, CORS_ALLOWED_ORIGINS: `http://127.0.0.1:${allowedPort}` }, stdio: ['ignore', 'pipe', 'inherit'],
});
const [line] = await once(server.stdout, 'data');
const api = String(line).trim();
console.log(`stand-in at ${api}`);

const runs = [
  ['audit.mjs', { TOKEN: token(10) }],
  ['protocol.mjs', { TOKEN: token(20), ALLOWED_ORIGIN: `http://127.0.0.1:${allowedPort}` }],
  ['story-apollo4.mjs', { TOKEN: token(100), GRAB_TOKEN: token(101) }],
  ['story-apollo3.mjs', { TOKEN: token(200), GRAB_TOKEN: token(201) }],
  ['story-urql.mjs', { TOKEN: token(300), GRAB_TOKEN: token(301) }],
  ['browser.mjs', { TOKEN: token(900), DENIED_TOKEN: token(901), ALLOWED_PORT: String(allowedPort) }],
];
const failed = [];
for (const [script, env] of runs) {
  const r = spawnSync(process.execPath, [script], {
    cwd: dir, stdio: 'inherit', timeout: 180000,
    env: { ...process.env, API_URL: api, VOUCHER_ID: '1', EXPIRED_TOKEN: token(999, now - 600), ...env },
  });
  if (r.status !== 0) failed.push(script);
}
server.kill();
if (failed.length > 0) {
  console.log(`selftest: failed against the stand-in: ${failed.join(', ')}`);
  process.exit(1);
}
console.log('selftest: every check passes against the stand-in');
