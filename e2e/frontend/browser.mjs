// The page in page/ in headless Chromium, from two origins the service is
// not on: a static server on ALLOWED_PORT serves it from an origin the
// service allows (CORS_ALLOWED_ORIGINS), one on DENIED_PORT from an origin
// it does not. From the first, the query, the grab and the subscription
// must all work (the subscription shows the grab as a live update); from
// the second, the browser must refuse all three (a
// CORS failure for the HTTP requests, a refused upgrade for the
// websocket). Settings: API_URL, TOKEN (for the allowed page), DENIED_TOKEN
// (another user's, for the denied one: if it got through, its grab would
// be a second order), VOUCHER_ID, ALLOWED_PORT and DENIED_PORT (0 or unset:
// any free port; the service must then allow the printed origin), CHROMIUM
// (default /usr/bin/chromium).
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { Steps, check, json } from './lib.mjs';

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) {
    console.error(`missing ${name}: set API_URL, TOKEN, DENIED_TOKEN, VOUCHER_ID (ALLOWED_PORT, DENIED_PORT, CHROMIUM optional)`);
    process.exit(2);
  }
  return v;
};
const api = env('API_URL');
const token = env('TOKEN');
const deniedToken = env('DENIED_TOKEN');
const voucherId = env('VOUCHER_ID');

const files = {
  '/': ['page/index.html', 'text/html; charset=utf-8'],
  '/index.html': ['page/index.html', 'text/html; charset=utf-8'],
  '/app.js': ['page/app.js', 'text/javascript; charset=utf-8'],
  '/graphql-ws.js': ['node_modules/graphql-ws/umd/graphql-ws.js', 'text/javascript; charset=utf-8'],
};

// serve starts a static server of the page on 127.0.0.1:port and resolves
// with its origin.
function serve(port) {
  const server = createServer(async (req, res) => {
    const file = files[new URL(req.url, 'http://x').pathname];
    if (!file) {
      // The favicon among others: nothing, and no error on the console.
      res.writeHead(204).end();
      return;
    }
    const body = await readFile(fileURLToPath(new URL(file[0], import.meta.url)));
    res.writeHead(200, { 'Content-Type': file[1], 'Cache-Control': 'no-store' }).end(body);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(port), '127.0.0.1', () => resolve({ server, origin: `http://127.0.0.1:${server.address().port}` }));
  });
}

const allowed = await serve(env('ALLOWED_PORT', '0'));
const denied = await serve(env('DENIED_PORT', '0'));
console.log(`page served from ${allowed.origin} (allowed) and ${denied.origin} (not allowed); service ${api}`);

const browser = await chromium.launch({
  executablePath: env('CHROMIUM', '/usr/bin/chromium'),
  // As the playground's browser test: loopback only, no background traffic.
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
    '--proxy-server=http://127.0.0.1:9', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-extensions', '--no-first-run',
  ],
});

// visit opens the page from origin and returns its story and what the
// browser printed to the console (where Chromium says why it blocked a
// request).
async function visit(origin, bearer) {
  const page = await browser.newPage();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  const hash = new URLSearchParams({ api, token: bearer, voucher: voucherId });
  await page.goto(`${origin}/#${hash}`);
  await page.waitForFunction(() => window.story && window.story.done, null, { timeout: 45000 });
  const story = await page.evaluate(() => window.story);
  await page.close();
  return { story, consoleLines };
}

const steps = new Steps('browser');

await steps.step(`from the allowed origin: query, grab and subscription work`, async () => {
  const { story, consoleLines } = await visit(allowed.origin, token);
  const failed = ['query', 'grab', 'subscription'].filter((k) => !story[k]?.ok);
  check(failed.length === 0, `${failed.map((k) => `${k}: ${story[k]?.detail}`).join('; ')}; the browser said: ${json(consoleLines)}`);
  return ['query', 'grab', 'subscription'].map((k) => `${k}: ${story[k].detail}`).join('; ');
}, 60000);

await steps.step(`from another origin: the browser refuses query, grab and subscription`, async () => {
  const { story, consoleLines } = await visit(denied.origin, deniedToken);
  const through = ['query', 'grab', 'subscription'].filter((k) => story[k]?.ok);
  check(through.length === 0, `got through: ${through.map((k) => `${k}: ${story[k].detail}`).join('; ')}`);
  check(consoleLines.some((l) => /CORS policy/.test(l)), `the browser did not name CORS as the reason: ${json(consoleLines)}`);
  return ['query', 'grab', 'subscription'].map((k) => `${k}: ${story[k].detail}`).join('; ');
}, 60000);

await browser.close();
allowed.server.close();
denied.server.close();
steps.done();
