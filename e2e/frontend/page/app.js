// What a shop's page does first, with nothing but fetch and graphql-ws
// (its browser build, served beside this file): a query and a grab over
// HTTP with the bearer token in the Authorization header (so the browser
// asks the service first: a CORS preflight), and a subscription over a
// websocket (whose Origin header names this page's origin). Each outcome
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

function subscription() {
  return new Promise((resolve, reject) => {
    let closed = '';
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
          stop();
          client.dispose();
          if (r.errors) reject(new Error(r.errors.map((e) => e.message).join('; ')));
          else resolve(`first event: remaining ${r.data.stockChanged.remaining}`);
        },
        error: (e) => reject(new Error(closed || (e && e.message) || 'websocket error (the upgrade was refused)')),
        complete: () => reject(new Error(closed || 'completed without an event')),
      },
    );
  });
}

async function run() {
  for (const [name, fn] of [['query', query], ['grab', grab], ['subscription', subscription]]) {
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('no answer within 10 s')), 10000));
    try {
      record(name, true, await Promise.race([fn(), timeout]));
    } catch (err) {
      record(name, false, `${err.name}: ${err.message}`);
    }
  }
  window.story.done = true;
}

run();
