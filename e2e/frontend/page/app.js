// What a shop's page does first, with nothing but fetch and graphql-ws
// (its browser build, served beside this file): a query and a grab over
// HTTP with the bearer token in the Authorization header (so the browser
// asks the service first: a CORS preflight), and a subscription over a
// websocket (whose Origin header names this page's origin) that must
// show the grab as a live update. Each outcome
// lands in window.story, which the runner (browser.mjs) reads.
'use strict';

const params = new URLSearchParams(location.hash.slice(1));
const api = params.get('api');
const token = params.get('token');
const voucherId = params.get('voucher');

window.story = { done: false };

function log(line) {
  document.getElementById('log').textContent += line + '\n';
}

function record(name, ok, detail) {
  window.story[name] = { ok, detail };
  log(`${ok ? 'ok  ' : 'FAIL'} ${name}: ${detail}`);
}

async function post(query, variables) {
  const res = await fetch(api, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/graphql-response+json, application/json',
      Authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  if (body.errors) throw new Error(`HTTP ${res.status}: ${body.errors.map((e) => e.message).join('; ')}`);
  return body.data;
}

async function query() {
  const data = await post('query PageVoucher($id: ID!) { voucher(id: $id) { id title seckill { remaining } } }', { id: voucherId });
  return `remaining ${data.voucher.seckill.remaining}`;
}

async function grab() {
  const data = await post(
    'mutation PageGrab($v: ID!, $r: String) { seckillVoucher(voucherId: $v, requestId: $r) { code orderId } }',
    { v: voucherId, r: 'page-' + crypto.randomUUID() },
  );
  const r = data.seckillVoucher;
  if (r.code !== 'OK') throw new Error(`grab answered ${r.code}`);
  return `order ${r.orderId}`;
}

// watch subscribes to the voucher's stock and resolves with the first
// event and with a promise of the first event after it that shows a lower
// remaining: the live update the page's own grab causes.
function watch() {
  return new Promise((resolve, reject) => {
    let closed = '';
    let first = null;
    let resolveLive;
    let rejectLive;
    const live = new Promise((res, rej) => { resolveLive = res; rejectLive = rej; });
    live.catch(() => {}); // reported by run() when awaited
    const fail = (err) => { reject(err); rejectLive(err); };
    const client = graphqlWs.createClient({
      url: api.replace(/^http/, 'ws'),
      connectionParams: { Authorization: `Bearer ${token}` },
      retryAttempts: 0,
      on: { closed: (e) => { closed = `closed ${e.code} ${e.reason || ''}`.trim(); } },
    });
    const stop = client.subscribe(
      { query: 'subscription PageStock($v: ID!) { stockChanged(voucherId: $v) { remaining sold } }', variables: { v: voucherId } },
      {
        next: (r) => {
          if (r.errors) {
            fail(new Error(r.errors.map((e) => e.message).join('; ')));
            return;
          }
          const remaining = r.data.stockChanged.remaining;
          if (first === null) {
            first = remaining;
            resolve({ first, live });
          } else if (remaining < first) {
            stop();
            client.dispose();
            resolveLive(`live update: remaining ${first} -> ${remaining}`);
          }
        },
        error: (e) => fail(new Error(closed || (e && e.message) || 'websocket error (the upgrade was refused)')),
        complete: () => fail(new Error(closed || 'completed without an event')),
      },
    );
  });
}

const within = (promise) => Promise.race([
  promise,
  new Promise((_, reject) => setTimeout(() => reject(new Error('no answer within 10 s')), 10000)),
]);

// step records what fn resolves with, or why it failed.
async function step(name, fn) {
  try {
    record(name, true, await within(fn()));
  } catch (err) {
    record(name, false, `${err.name}: ${err.message}`);
  }
}

// run: the query; the subscription (its first event is the stock now);
// the grab; then the subscription's live update after the grab.
async function run() {
  await step('query', query);
  let watching = null;
  try {
    watching = await within(watch());
  } catch (err) {
    record('subscription', false, `${err.name}: ${err.message}`);
  }
  await step('grab', grab);
  if (watching) await step('subscription', () => watching.live);
  window.story.done = true;
}

run();
