// The rest of the wire a browser app meets, beyond graphql-http's audit:
// CORS answers for an allowed and a refused origin (ALLOWED_ORIGIN, and
// an origin nobody allows), the websocket upgrade's Origin check, 406 for
// a client that accepts only text/html, 400 for a request without a
// query, the answer to a batched array, and Retry-After on RATE_LIMITED.
// Settings: API_URL, TOKEN, ALLOWED_ORIGIN, VOUCHER_ID (a running seckill
// voucher: the token's user takes at most one unit of it).
import WebSocket from 'ws';
import { Steps, check, json } from './lib.mjs';

const api = process.env.API_URL;
const token = process.env.TOKEN;
const allowedOrigin = process.env.ALLOWED_ORIGIN;
const voucherId = process.env.VOUCHER_ID;
if (!api || !token || !allowedOrigin || !voucherId) {
  console.error('missing API_URL, TOKEN, ALLOWED_ORIGIN or VOUCHER_ID');
  process.exit(2);
}
const refusedOrigin = 'http://refused.example';
const steps = new Steps('protocol');

const preflight = (origin) => fetch(api, {
  method: 'OPTIONS',
  headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' },
});

const post = (headers, body) => fetch(api, {
  method: 'POST',
  headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}`, ...headers },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});

await steps.step('a preflight from the allowed origin is answered with its CORS headers', async () => {
  const res = await preflight(allowedOrigin);
  const h = (name) => res.headers.get(name) ?? '';
  check(res.ok, `preflight answered HTTP ${res.status}`);
  check(h('access-control-allow-origin') === allowedOrigin || h('access-control-allow-origin') === '*', `Access-Control-Allow-Origin is "${h('access-control-allow-origin')}", want ${allowedOrigin}`);
  check(/authorization/i.test(h('access-control-allow-headers')) && /content-type/i.test(h('access-control-allow-headers')), `Access-Control-Allow-Headers is "${h('access-control-allow-headers')}", want authorization and content-type`);
  check(/POST/.test(h('access-control-allow-methods')), `Access-Control-Allow-Methods is "${h('access-control-allow-methods')}", want POST`);
  return `HTTP ${res.status}`;
});

await steps.step('a POST from the allowed origin carries Access-Control-Allow-Origin', async () => {
  const res = await post({ Origin: allowedOrigin }, { query: '{ __typename }' });
  const acao = res.headers.get('access-control-allow-origin');
  check(acao === allowedOrigin || acao === '*', `Access-Control-Allow-Origin is ${json(acao)}, want ${allowedOrigin}`);
});

await steps.step('another origin gets no CORS headers', async () => {
  const res = await preflight(refusedOrigin);
  const acao = res.headers.get('access-control-allow-origin');
  check(!acao, `Access-Control-Allow-Origin ${json(acao)} for ${refusedOrigin}`);
  return `HTTP ${res.status}`;
});

// upgrade opens a websocket with an Origin header and resolves with the
// HTTP status of the handshake (101 when it was accepted).
const upgrade = (origin) => new Promise((resolve) => {
  const ws = new WebSocket(api.replace(/^http/, 'ws'), 'graphql-transport-ws', { origin });
  ws.on('open', () => { ws.close(); resolve(101); });
  ws.on('unexpected-response', (_, res) => { resolve(res.statusCode); ws.terminate(); });
  ws.on('error', (err) => resolve(`error ${err.message}`));
});

await steps.step('a websocket from the allowed origin is upgraded', async () => {
  const status = await upgrade(allowedOrigin);
  check(status === 101, `the upgrade with Origin ${allowedOrigin} answered ${status}`);
});

await steps.step('a websocket from another origin is refused 403', async () => {
  const status = await upgrade(refusedOrigin);
  check(status === 403, `the upgrade with Origin ${refusedOrigin} answered ${status}, want 403`);
});

await steps.step('an unusable token gets 401 with UNAUTHENTICATED and a challenge', async () => {
  const res = await post({ Accept: 'application/json', Authorization: 'Bearer not.a.token' }, { query: '{ vouchers(first: 1) { edges { node { id } } } }' });
  const body = await res.json();
  check(res.status === 401, `HTTP ${res.status}, want 401`);
  check(body.errors?.[0]?.extensions?.code === 'UNAUTHENTICATED', `errors ${json(body.errors)}, want UNAUTHENTICATED`);
  check(/^Bearer/.test(res.headers.get('www-authenticate') ?? ''), `WWW-Authenticate ${json(res.headers.get('www-authenticate'))}, want a Bearer challenge`);
});

await steps.step('a client accepting only text/html gets 406', async () => {
  const res = await post({ Accept: 'text/html' }, { query: '{ __typename }' });
  check(res.status === 406, `HTTP ${res.status}, want 406`);
});

await steps.step('a request without a query gets 400', async () => {
  const res = await post({ Accept: 'application/json' }, {});
  check(res.status === 400, `HTTP ${res.status}, want 400`);
});

await steps.step("a batched array is answered 'batching is not supported'", async () => {
  const res = await post({ Accept: 'application/json' }, [{ query: '{ __typename }' }, { query: '{ __typename }' }]);
  const text = await res.text();
  check(/batching is not supported/i.test(text), `HTTP ${res.status}: ${text.slice(0, 300)}`);
  return `HTTP ${res.status}`;
});

// Grabs are limited per user (RATE_USER_PER_SEC, 10 by default): thirty
// at once from one user get some RATE_LIMITED answers.
await steps.step('RATE_LIMITED answers carry Retry-After', async () => {
  const answers = await Promise.all(Array.from({ length: 30 }, async () => {
    const res = await post({ Accept: 'application/json' }, { query: `mutation { seckillVoucher(voucherId: ${JSON.stringify(voucherId)}) { code } }` });
    const body = await res.json();
    return { status: res.status, retryAfter: res.headers.get('retry-after'), limited: body.errors?.some((e) => e.extensions?.code === 'RATE_LIMITED') };
  }));
  const limited = answers.filter((a) => a.limited);
  check(limited.length > 0, `none of 30 grabs at once was RATE_LIMITED: ${json(answers.map((a) => a.status))}`);
  const bare = limited.filter((a) => !/^[1-9][0-9]*$/.test(a.retryAfter ?? ''));
  check(bare.length === 0, `${bare.length} of ${limited.length} RATE_LIMITED answers (HTTP ${[...new Set(bare.map((a) => a.status))].join(', ')}) have no Retry-After in whole seconds`);
  return `${limited.length} limited, HTTP ${[...new Set(limited.map((a) => a.status))].join(', ')}, Retry-After ${limited[0].retryAfter}`;
});

steps.done();
