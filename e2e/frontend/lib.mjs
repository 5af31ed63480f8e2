// What every story shares: its settings, the operations a shop's frontend
// sends (written against the schema the stories need: SeckillInfo.id and
// StockUpdate.seckill, which the service does not have yet), a
// fetch that records what went over the wire, the step runner that lists
// every failed step before exiting non-zero, and the checks that need no
// client of their own.
import { createHash, randomUUID } from 'node:crypto';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

// settings reads the environment: API_URL (the service's /query, required),
// TOKEN (a user's bearer token), EXPIRED_TOKEN (the same kind of token,
// expired), VOUCHER_ID (a running seckill voucher the user has not bought),
// GRAB_TOKEN (optional: another user's token; its grab makes a live change
// while the story's subscription runs).
export function settings() {
  const need = (name) => {
    const v = process.env[name];
    if (!v) {
      console.error(`missing ${name}: set API_URL, TOKEN, EXPIRED_TOKEN and VOUCHER_ID (GRAB_TOKEN optional)`);
      process.exit(2);
    }
    return v;
  };
  const api = need('API_URL');
  return {
    api,
    ws: api.replace(/^http/, 'ws'),
    token: need('TOKEN'),
    expiredToken: need('EXPIRED_TOKEN'),
    voucherId: need('VOUCHER_ID'),
    grabToken: process.env.GRAB_TOKEN || '',
  };
}

export const VOUCHERS = /* GraphQL */ `
  query Vouchers {
    vouchers(first: 100) { edges { node { id title seckill { id remaining } } } }
  }`;

export const VOUCHER = /* GraphQL */ `
  query Voucher($id: ID!) {
    voucher(id: $id) { id title seckill { id initialStock remaining perUserLimit beginAt endAt } }
  }`;

export const GRAB = /* GraphQL */ `
  mutation Grab($voucherId: ID!, $requestId: String) {
    seckillVoucher(voucherId: $voucherId, requestId: $requestId) { code orderId message }
  }`;

export const STOCK = /* GraphQL */ `
  subscription Stock($voucherId: ID!) {
    stockChanged(voucherId: $voucherId) { voucherId remaining sold soldOut seckill { id remaining } }
  }`;

export const MY_ORDERS = /* GraphQL */ `
  query MyOrders { myOrders(first: 1) { edges { node { id status } } } }`;

// apqProbe is a query no earlier run has registered (a fresh alias), so
// its first hash-only request must miss.
export function apqProbe() {
  const alias = 'probe' + randomUUID().replaceAll('-', '');
  return `query ApqProbe { ${alias}: vouchers(first: 1) { edges { node { id } } } }`;
}

export const sha256 = (text) => createHash('sha256').update(text).digest('hex');

export const newRequestId = () => 'front-' + randomUUID();

// grabTwice is the grab step of every story: grab(requestId) sends the
// client's seckillVoucher mutation and resolves with its result; a retry
// with the same request id must answer the same order.
export async function grabTwice(grab) {
  const requestId = newRequestId();
  const first = await grab(requestId);
  const again = await grab(requestId);
  check(first.code === 'OK' && first.orderId, `first grab: ${json(first)}`);
  check(again.code === 'OK' && again.orderId === first.orderId, `retry with the same request id: ${json(again)}, first ${json(first)}`);
  return `order ${first.orderId}`;
}

// recordingFetch is fetch that keeps each request's parsed body and the
// answer's status and parsed body, for the steps that check the wire.
export function recordingFetch() {
  const log = [];
  const fetchFn = async (input, init = {}) => {
    const res = await fetch(input, init);
    const entry = { url: String(input.url ?? input), method: init.method ?? 'GET', request: parse(init.body), status: res.status };
    if (entry.method === 'GET') {
      const u = new URL(entry.url);
      entry.request = Object.fromEntries([...u.searchParams].map(([k, v]) => [k, k === 'query' || k === 'operationName' ? v : parse(v)]));
    }
    entry.response = parse(await res.clone().text());
    log.push(entry);
    return res;
  };
  return { fetchFn, log };
}

function parse(text) {
  if (typeof text !== 'string') return text;
  try { return JSON.parse(text); } catch { return text; }
}

// Steps runs named steps one after another; a failed step is printed with
// its reason and the run goes on, so that one run lists everything that
// is wrong. done() exits non-zero if any step failed.
export class Steps {
  constructor(story) { this.story = story; this.failed = []; }

  async step(name, fn, timeoutMs = 15000) {
    let timer;
    try {
      const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs); });
      const note = await Promise.race([fn(), timeout]);
      console.log(`ok   ${this.story}: ${name}${note ? ` (${note})` : ''}`);
      return true;
    } catch (err) {
      this.failed.push(name);
      console.log(`FAIL ${this.story}: ${name}: ${err?.message ?? err}`);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  done() {
    if (this.failed.length > 0) {
      console.log(`${this.story}: ${this.failed.length} step(s) failed: ${this.failed.join('; ')}`);
      process.exit(1);
    }
    console.log(`${this.story}: every step passed`);
    process.exit(0);
  }
}

export function check(cond, message) {
  if (!cond) throw new Error(message);
}

export const json = (v) => JSON.stringify(v);

// checkApqWire checks the three requests of one persisted query, in the
// order a client sends them: the hash alone, missed with the code clients
// look for; the hash with the text, which registers it; the hash alone
// again, answered from the registration.
export function checkApqWire(log, operationName) {
  const sent = log.filter((e) => (e.request?.operationName ?? '') === operationName);
  check(sent.length === 3, `want 3 requests of ${operationName} (hash miss, registration, hash only), saw ${sent.length}: ${json(sent.map((e) => ({ status: e.status, query: !!e.request?.query, response: e.response })))}`);
  const [miss, register, hit] = sent;
  const hashOnly = (e) => !e.request?.query && !!e.request?.extensions?.persistedQuery?.sha256Hash;
  check(hashOnly(miss), `the first request was not hash-only: ${json(miss.request)}`);
  const missCode = miss.response?.errors?.[0]?.extensions?.code;
  check(missCode === 'PERSISTED_QUERY_NOT_FOUND', `the miss answered HTTP ${miss.status} with code ${missCode} (want PERSISTED_QUERY_NOT_FOUND): ${json(miss.response)}`);
  check(!!register.request?.query && register.response?.data && !register.response?.errors, `the registration failed: HTTP ${register.status} ${json(register.response)}`);
  check(hashOnly(hit), `the third request was not hash-only: ${json(hit.request)}`);
  check(hit.response?.data && !hit.response?.errors, `the hash-only request after registration failed: HTTP ${hit.status} ${json(hit.response)}`);
  return `miss HTTP ${miss.status}, registration HTTP ${register.status}, hash-only HTTP ${hit.status}`;
}

// wsClient is the graphql-ws client every story's subscription link or
// exchange is built on (Apollo's GraphQLWsLink and urql's
// subscriptionExchange both take one).
export function wsClient(url, token, on = {}) {
  return createClient({
    url,
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${token}` },
    retryAttempts: 0,
    lazy: true,
    on,
  });
}

// expiredSocket subscribes with an expired token and resolves with how the
// socket was closed, as graphql-ws's `closed` event reports it: the
// documented place for a client to learn it must refresh its token.
export function expiredSocket(s) {
  return new Promise((resolve) => {
    const client = wsClient(s.ws, s.expiredToken, {
      closed: (event) => resolve({ code: event?.code, reason: event?.reason ?? '' }),
    });
    client.subscribe({ query: STOCK, variables: { voucherId: s.voucherId } }, {
      next: () => {}, error: () => {}, complete: () => {},
    });
  }).then(({ code, reason }) => {
    check(code === 4401, `the socket closed with ${code} "${reason}", want 4401`);
    check(/expired/i.test(reason), `4401's reason "${reason}" does not say the token expired`);
    return `4401 "${reason}"`;
  });
}

// grabAs grabs one unit as another user over plain fetch: the change the
// story's subscription must see.
export async function grabAs(s, token) {
  const res = await fetch(s.api, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/graphql-response+json, application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: GRAB, variables: { voucherId: s.voucherId, requestId: newRequestId() } }),
  });
  const body = await res.json();
  check(body?.data?.seckillVoucher?.code === 'OK', `the other user's grab answered HTTP ${res.status} ${json(body)}`);
}

// EventQueue holds a subscription's events; next(want) resolves with the
// first that satisfies want, waiting for more as they come.
export class EventQueue {
  constructor() { this.events = []; this.waiters = []; this.error = null; }
  push(v) { this.events.push(v); this.wake(); }
  fail(err) { this.error = err; this.wake(); }
  wake() { for (const w of this.waiters.splice(0)) w(); }
  async next(want) {
    for (;;) {
      const hit = this.events.find(want);
      if (hit) return hit;
      if (this.error) throw new Error(`the subscription failed: ${this.error?.message ?? json(this.error)}`);
      await new Promise((r) => this.waiters.push(r));
    }
  }
}

// stockEventUpdatesCache is the subscription step of every story: cached()
// reads Voucher.seckill.remaining from the client's cache, subscribe(events)
// starts the client's stockChanged subscription feeding events and returns
// its stop. The first event carries the stock as it is now, which the
// story's own grab has lowered below what the cache holds; where it does
// not differ, another user's grab makes a change. The cache must then say
// what the event said, with no cache write by the story.
export async function stockEventUpdatesCache(s, cached, subscribe, warnings) {
  const start = cached();
  check(typeof start === 'number', 'the voucher is not in the cache (its query failed above)');
  const events = new EventQueue();
  const stop = subscribe(events);
  try {
    const first = await events.next(() => true);
    if (first.remaining === start) {
      check(s.grabToken, `the first event says ${first.remaining}, as the cache does, and no GRAB_TOKEN to make a change`);
      await grabAs(s, s.grabToken);
    }
    // Apollo and Graphcache write a result to the cache before they hand
    // it to the observer: the cache is read as the event arrives.
    const changed = await events.next((e) => e.remaining !== start);
    const now = cached();
    const noKey = warnings.filter((w) => /SeckillInfo|StockUpdate|seckill/.test(w));
    check(now === changed.remaining, `an event said remaining ${changed.remaining}; the cached voucher still says ${now} (was ${start})${noKey.length ? `; the cache warned: ${noKey.join(' | ')}` : ''}`);
    return `cached remaining ${start} -> ${now}`;
  } finally {
    stop();
  }
}

// captureWarnings keeps what the clients print with console.warn (a cache
// that cannot key an object says so there), still printing it.
export function captureWarnings() {
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => { warnings.push(args.map(String).join(' ')); warn(...args); };
  return warnings;
}
