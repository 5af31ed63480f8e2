// The story as an Apollo Client app lives it, for Apollo Client 4 and 3.14
// alike: each version's entry (story-apollo4.mjs, story-apollo3.mjs) hands
// in its classes and its error hook, and everything else is the set-up the
// Apollo docs show: an InMemoryCache with no type policies, HttpLink, the
// persisted-queries link, GraphQLWsLink split off for subscriptions, and
// the error link as the place that notices an expired token.
import {
  Steps, settings, check, json, sha256, grabTwice, apqProbe, recordingFetch, checkApqWire,
  wsClient, expiredSocket, stockEventUpdatesCache, captureWarnings, VOUCHERS, VOUCHER, GRAB, STOCK, MY_ORDERS,
} from './lib.mjs';
import { map } from 'rxjs';

// v: { ApolloClient, InMemoryCache, HttpLink, ApolloLink, gql, GraphQLWsLink,
//      persistedQueries(opts) -> link, errorLink(hook) -> link },
// where hook receives { codes, status, operation, forward }: the GraphQL
// error codes and the HTTP status of the failed answer (HttpLink leaves
// the response in the operation's context), whatever shape the version
// gives the error.
export async function runApolloStory(story, v) {
  const s = settings();
  const steps = new Steps(story);
  const warnings = captureWarnings();

  const costs = [];
  const { client, wire, close } = makeClient(v, s, () => s.token, () => {}, (c) => costs.push(c));
  const voucher = v.gql(VOUCHER);
  let before;

  await steps.step('query the vouchers list', async () => {
    const { data } = await client.query({ query: v.gql(VOUCHERS), fetchPolicy: 'network-only' });
    const ids = data.vouchers.edges.map((e) => e.node.id);
    check(ids.includes(s.voucherId), `voucher ${s.voucherId} not in the list ${json(ids)}`);
    return `${ids.length} vouchers`;
  });

  await steps.step('each answer tells its cost and the budget left (extensions.cost)', async () => {
    costs.length = 0;
    await client.query({ query: v.gql(VOUCHERS), fetchPolicy: 'network-only' });
    const c = costs.at(-1);
    check(c && c.requested >= c.actual && c.actual > 0 && c.capacity > 0 && c.restoreRate > 0 &&
      c.remaining >= 0 && c.remaining <= c.capacity, `extensions.cost ${json(c)}`);
    return `cost ${json(c)}`;
  });

  await steps.step("query a voucher's seckill info", async () => {
    const { data } = await client.query({ query: voucher, variables: { id: s.voucherId }, fetchPolicy: 'network-only' });
    check(typeof data.voucher?.seckill?.remaining === 'number', `no seckill.remaining: ${json(data)}`);
    before = data.voucher.seckill.remaining;
    return `remaining ${before}`;
  });

  await steps.step('grab twice with one request id: one order', () => grabTwice(async (requestId) =>
    (await client.mutate({ mutation: v.gql(GRAB), variables: { voucherId: s.voucherId, requestId } })).data.seckillVoucher));

  await steps.step('automatic persisted query: miss, registration, hash only', async () => {
    const probe = v.gql(apqProbe());
    await client.query({ query: probe, fetchPolicy: 'network-only' });
    await client.query({ query: probe, fetchPolicy: 'network-only' });
    return checkApqWire(wire, 'ApqProbe');
  });

  await steps.step('a stockChanged event updates the cached Voucher.seckill.remaining', () => stockEventUpdatesCache(
    s,
    () => client.readQuery({ query: voucher, variables: { id: s.voucherId } })?.voucher?.seckill?.remaining,
    (events) => {
      const sub = client.subscribe({ query: v.gql(STOCK), variables: { voucherId: s.voucherId } }).subscribe({
        next: (r) => (r.errors?.length || r.error ? events.fail(r.error ?? r.errors[0]) : events.push(r.data.stockChanged)),
        error: (e) => events.fail(e),
      });
      return () => sub.unsubscribe();
    },
    warnings,
  ));

  await steps.step('an expired token is noticed by the error link, refreshed and retried', async () => {
    let token = s.expiredToken;
    const seen = [];
    const { client: expiring, close: closeExpiring } = makeClient(v, s, () => token, (e) => {
      seen.push(e);
      if (e.status === 401 || e.codes.includes('UNAUTHENTICATED')) {
        token = s.token; // what a real app gets from its refresh call
        return true;
      }
      return false;
    });
    try {
      const { data } = await expiring.query({ query: v.gql(MY_ORDERS), fetchPolicy: 'network-only' });
      check(seen.length > 0, 'the error link never saw the expired token');
      check(data?.myOrders, `the retried query answered ${json(data)}`);
      const e = seen[0];
      check(e.status === 401, `seen as HTTP ${e.status ?? '200'} with codes ${json(e.codes)}; want 401`);
      return `seen as HTTP ${e.status} with codes ${json(e.codes)}`;
    } catch (err) {
      throw new Error(`${err.message}; the error link saw ${json(seen.map(({ codes, status }) => ({ codes, status })))}`);
    } finally {
      closeExpiring();
    }
  });

  await steps.step('a websocket with an expired token closes 4401 saying why', () => expiredSocket(s));

  close();
  steps.done();
}

// makeClient is the client of the docs: [error link, auth, cost,
// persisted queries, HTTP] for queries and mutations, GraphQLWsLink for
// subscriptions. onAuthError(hookArgs) returns true when it refreshed the
// token, and the operation is then sent again; onCost gets each answer's
// extensions.cost.
function makeClient(v, s, token, onAuthError, onCost = () => {}) {
  const { fetchFn, log } = recordingFetch();
  const auth = new v.ApolloLink((operation, forward) => {
    operation.setContext(({ headers = {} }) => ({ headers: { ...headers, Authorization: `Bearer ${token()}` } }));
    return forward(operation);
  });
  // Apollo 4's links return rxjs Observables, 3.14's zen-observable ones.
  const cost = new v.ApolloLink((operation, forward) => {
    const seen = (result) => { if (result.extensions?.cost) onCost(result.extensions.cost); return result; };
    const answers = forward(operation);
    return answers.pipe ? answers.pipe(map(seen)) : answers.map(seen);
  });
  const http = v.ApolloLink.from([
    v.errorLink((e) => (onAuthError(e) ? e.forward(e.operation) : undefined)),
    auth,
    cost,
    v.persistedQueries({ sha256 }),
    new v.HttpLink({ uri: s.api, fetch: fetchFn }),
  ]);
  const ws = wsClient(s.ws, token());
  const link = v.ApolloLink.split((op) => isSubscription(op.query), new v.GraphQLWsLink(ws), http);
  const client = new v.ApolloClient({ link, cache: new v.InMemoryCache() });
  return { client, wire: log, close: () => { client.stop(); ws.dispose(); } };
}

const isSubscription = (doc) => doc.definitions.some((d) => d.kind === 'OperationDefinition' && d.operation === 'subscription');

// httpStatus is the status of the answer an operation failed with, if it
// came over HTTP.
export const httpStatus = (operation) => operation.getContext().response?.status;
