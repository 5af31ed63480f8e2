// The story with urql (@urql/core, the client urql's framework bindings
// wrap), set up as its docs show: Graphcache (the normalized cache) with no
// configuration, authExchange (its didAuthError is the documented place
// that notices an expired token), persistedExchange, fetchExchange, and
// subscriptionExchange forwarding to graphql-ws.
import { Client, fetchExchange, subscriptionExchange, gql } from '@urql/core';
import { cacheExchange } from '@urql/exchange-graphcache';
import { persistedExchange } from '@urql/exchange-persisted';
import { authExchange } from '@urql/exchange-auth';
import {
  Steps, settings, check, json, sha256, grabTwice, apqProbe, recordingFetch, checkApqWire,
  wsClient, expiredSocket, stockEventUpdatesCache, captureWarnings, VOUCHERS, VOUCHER, GRAB, STOCK, MY_ORDERS,
} from './lib.mjs';

const s = settings();
const steps = new Steps('urql');
const warnings = captureWarnings();

// makeClient returns a client whose token() is read for every operation;
// onAuthError(error) returns whether the error is an auth failure, and
// refresh() is what refreshAuth does then.
function makeClient(token, onAuthError = () => false, refresh = async () => {}) {
  const { fetchFn, log } = recordingFetch();
  const ws = wsClient(s.ws, token());
  const client = new Client({
    url: s.api,
    fetch: fetchFn,
    exchanges: [
      cacheExchange({}),
      authExchange(async (utils) => ({
        addAuthToOperation: (operation) => utils.appendHeaders(operation, { Authorization: `Bearer ${token()}` }),
        didAuthError: (error) => onAuthError(error),
        refreshAuth: refresh,
      })),
      persistedExchange({ generateHash: async (query) => sha256(query) }),
      fetchExchange,
      subscriptionExchange({
        forwardSubscription: (request) => ({
          subscribe: (sink) => ({ unsubscribe: ws.subscribe({ ...request, query: request.query || '' }, sink) }),
        }),
      }),
    ],
  });
  return { client, wire: log, close: () => ws.dispose() };
}

const ok = (result) => {
  if (result.error) throw new Error(result.error.message);
  return result.data;
};

const { client, wire, close } = makeClient(() => s.token);
const voucher = gql(VOUCHER);
const vars = { id: s.voucherId };

await steps.step('query the vouchers list', async () => {
  const data = ok(await client.query(gql(VOUCHERS), {}, { requestPolicy: 'network-only' }).toPromise());
  const ids = data.vouchers.edges.map((e) => e.node.id);
  check(ids.includes(s.voucherId), `voucher ${s.voucherId} not in the list ${json(ids)}`);
  return `${ids.length} vouchers`;
});

await steps.step("query a voucher's seckill info", async () => {
  const data = ok(await client.query(voucher, vars, { requestPolicy: 'network-only' }).toPromise());
  check(typeof data.voucher?.seckill?.remaining === 'number', `no seckill.remaining: ${json(data)}`);
  return `remaining ${data.voucher.seckill.remaining}`;
});

await steps.step('grab twice with one request id: one order', () => grabTwice(async (requestId) =>
  ok(await client.mutation(gql(GRAB), { voucherId: s.voucherId, requestId }).toPromise()).seckillVoucher));

await steps.step('automatic persisted query: miss, registration, hash only', async () => {
  const probe = gql(apqProbe());
  ok(await client.query(probe, {}, { requestPolicy: 'network-only' }).toPromise());
  ok(await client.query(probe, {}, { requestPolicy: 'network-only' }).toPromise());
  return checkApqWire(wire, 'ApqProbe');
});

await steps.step('a stockChanged event updates the cached Voucher.seckill.remaining', () => stockEventUpdatesCache(
  s,
  () => client.readQuery(voucher, vars, { requestPolicy: 'cache-only' })?.data?.voucher?.seckill?.remaining,
  (events) => {
    const sub = client.subscription(gql(STOCK), { voucherId: s.voucherId }).subscribe((r) => {
      if (r.error) events.fail(r.error);
      else events.push(r.data.stockChanged);
    });
    return () => sub.unsubscribe();
  },
  warnings,
));

await steps.step('an expired token is noticed by didAuthError, refreshed and retried', async () => {
  let token = s.expiredToken;
  const seen = [];
  const { client: expiring, close: closeExpiring } = makeClient(
    () => token,
    (error) => {
      const status = error.response?.status;
      const codes = error.graphQLErrors.map((e) => e.extensions?.code);
      seen.push({ status, codes });
      return status === 401 || codes.includes('UNAUTHENTICATED');
    },
    async () => { token = s.token; }, // what a real app gets from its refresh call
  );
  try {
    const r = await expiring.query(gql(MY_ORDERS), {}, { requestPolicy: 'network-only' }).toPromise();
    check(seen.length > 0, `didAuthError was never asked (answer: ${r.error?.message ?? json(r.data)})`);
    check(!r.error && r.data?.myOrders, `the retried query answered ${r.error?.message ?? json(r.data)}; didAuthError saw ${json(seen)}`);
    check(seen[0].status === 401, `seen as HTTP ${seen[0].status} with codes ${json(seen[0].codes)}; want 401`);
    return `seen as HTTP ${seen[0].status} with codes ${json(seen[0].codes)}`;
  } finally {
    closeExpiring();
  }
});

await steps.step('a websocket with an expired token closes 4401 saying why', () => expiredSocket(s));

close();
steps.done();
