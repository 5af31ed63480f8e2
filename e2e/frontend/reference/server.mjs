// A stand-in of the service as the checks of this folder expect it, in a
// few lines of Node on graphql-http and graphql-ws, with the schema the
// stories assume (SeckillInfo.id; StockUpdate.seckill): CORS for the
// origins in CORS_ALLOWED_ORIGINS, automatic persisted queries answering a
// miss with PERSISTED_QUERY_NOT_FOUND, UNAUTHENTICATED for an expired
// token, 4401 "token expired" on a websocket, idempotent grabs,
// Retry-After on RATE_LIMITED, no batching, extensions.cost on every
// answer with data (a flat price of 1 from a budget of 1,000). It keeps
// one voucher in memory and checks no signature: it exists to show that
// the checks pass against a service that does what they ask (npm run
// selftest), not to be one. PORT (default 0) picks its port; it prints its
// URL.
import { createServer } from 'node:http';
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { buildSchema, GraphQLError } from 'graphql';
import { createHandler } from 'graphql-http';
import { WebSocketServer } from 'ws';
import { useServer } from 'graphql-ws/use/ws';

const schema = buildSchema(`
  type Query { vouchers(first: Int = 20): VoucherConnection!  voucher(id: ID!): Voucher  myOrders(first: Int = 20): OrderConnection! }
  type Mutation { seckillVoucher(voucherId: ID!, requestId: String): SeckillResult! }
  type Subscription { stockChanged(voucherId: ID!): StockUpdate! }
  type VoucherConnection { edges: [VoucherEdge!]! }
  type VoucherEdge { node: Voucher! }
  type Voucher { id: ID!  title: String!  seckill: SeckillInfo }
  type SeckillInfo { id: ID!  initialStock: Int!  remaining: Int!  perUserLimit: Int!  beginAt: String!  endAt: String! }
  type SeckillResult { code: String!  orderId: ID  message: String! }
  type StockUpdate { voucherId: ID!  remaining: Int!  sold: Int!  soldOut: Boolean!  seckill: SeckillInfo! }
  type OrderConnection { edges: [OrderEdge!]! }
  type OrderEdge { node: Order! }
  type Order { id: ID!  status: String! }
`);

const stock = { initial: 1000, remaining: 1000 };
const changes = new EventEmitter();
const orders = new Map(); // user/requestId -> order id
const bought = new Set(); // users
let nextOrder = 1;

const seckill = () => ({ id: '1', initialStock: stock.initial, remaining: stock.remaining, perUserLimit: 1, beginAt: '2026-01-01T00:00:00Z', endAt: '2099-01-01T00:00:00Z' });
const voucher = () => ({ id: '1', title: 'Reference voucher', seckill: seckill() });
const update = () => ({ voucherId: '1', remaining: stock.remaining, sold: stock.initial - stock.remaining, soldOut: stock.remaining === 0, seckill: seckill() });

// limitGrabs allows each user 10 grabs a second, as the service's
// RATE_USER_PER_SEC does by default.
const grabTimes = new Map();
function limitGrabs(user) {
  const now = Date.now();
  const recent = (grabTimes.get(user) ?? []).filter((t) => now - t < 1000);
  if (recent.length >= 10) {
    throw new GraphQLError('too many requests; retry later', { extensions: { code: 'RATE_LIMITED', retryAfterMs: 1000 - (now - recent[0]) } });
  }
  recent.push(now);
  grabTimes.set(user, recent);
}

const unauthenticated = (message) => new GraphQLError(message, { extensions: { code: 'UNAUTHENTICATED' } });

// identity reads a bearer token's claims (no signature check: a stand-in).
function identity(header) {
  const token = /^Bearer (.+)$/.exec(header ?? '')?.[1];
  if (!token) return { error: 'missing token' };
  try {
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
    if (claims.exp * 1000 < Date.now()) return { error: 'token expired' };
    return { user: claims.sub };
  } catch {
    return { error: 'invalid token' };
  }
}

const need = (ctx) => {
  if (ctx.error) throw unauthenticated(ctx.error);
  return ctx.user;
};

const rootValue = {
  vouchers: () => ({ edges: [{ node: voucher() }] }),
  voucher: ({ id }) => (id === '1' ? voucher() : null),
  myOrders: (_, ctx) => {
    const user = need(ctx);
    return { edges: [...orders].filter(([k]) => k.startsWith(user + '/')).map(([, id]) => ({ node: { id, status: 'UNPAID' } })) };
  },
  seckillVoucher: ({ requestId }, ctx) => {
    const user = need(ctx);
    limitGrabs(user);
    const key = `${user}/${requestId}`;
    if (requestId && orders.has(key)) return { code: 'OK', orderId: orders.get(key), message: 'ok' };
    if (bought.has(user)) return { code: 'LIMIT_REACHED', orderId: null, message: 'limit reached' };
    if (stock.remaining === 0) return { code: 'SOLD_OUT', orderId: null, message: 'sold out' };
    stock.remaining--;
    bought.add(user);
    const id = String(nextOrder++);
    orders.set(key, id);
    changes.emit('change');
    return { code: 'OK', orderId: id, message: 'ok' };
  },
};

const subscriptionRoot = {
  async *stockChanged() {
    yield { stockChanged: update() };
    for (;;) {
      await new Promise((r) => changes.once('change', r));
      yield { stockChanged: update() };
    }
  },
};

const allowed = (process.env.CORS_ALLOWED_ORIGINS ?? '').split(',').map((o) => o.trim()).filter(Boolean);
const persisted = new Map();
const handler = createHandler({ schema, rootValue, context: (req) => req.context });

const server = createServer(async (req, res) => {
  const origin = req.headers.origin;
  if (origin && allowed.includes(origin)) {
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Vary', 'Origin');
  }
  if (req.method === 'OPTIONS') {
    res.setHeader('Access-Control-Allow-Methods', 'GET, POST');
    res.setHeader('Access-Control-Allow-Headers', 'Authorization, Content-Type');
    res.writeHead(204).end();
    return;
  }
  const chunks = [];
  for await (const c of req) chunks.push(c);
  let body = Buffer.concat(chunks).toString();
  const url = new URL(req.url, 'http://x');
  // Automatic persisted queries, before graphql-http sees the request: in
  // a POST's body or, as urql sends them, a GET's parameters.
  let params;
  try {
    params = req.method === 'GET'
      ? { query: url.searchParams.get('query'), extensions: JSON.parse(url.searchParams.get('extensions') ?? 'null') }
      : JSON.parse(body);
  } catch {
    // Not JSON: graphql-http answers that.
  }
  if (Array.isArray(params)) {
    res.writeHead(400, { 'Content-Type': 'application/json' }).end(JSON.stringify({ errors: [{ message: 'batching is not supported' }] }));
    return;
  }
  const hash = params?.extensions?.persistedQuery?.sha256Hash;
  if (hash && !params.query) {
    if (!persisted.has(hash)) {
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ errors: [{ message: 'PersistedQueryNotFound', extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } }] }));
      return;
    }
    if (req.method === 'GET') url.searchParams.set('query', persisted.get(hash));
    else body = JSON.stringify({ ...params, query: persisted.get(hash) });
  } else if (hash && createHash('sha256').update(params.query).digest('hex') === hash) {
    persisted.set(hash, params.query);
  }
  // A token that was sent but is unusable: 401 before anything runs, as
  // the service answers it (a missing token is left to the resolvers).
  const id = identity(req.headers.authorization);
  if (req.headers.authorization && id.error) {
    const type = /application\/graphql-response\+json/.test(req.headers.accept ?? '') ? 'application/graphql-response+json' : 'application/json';
    res.writeHead(401, { 'Content-Type': type, 'WWW-Authenticate': 'Bearer error="invalid_token"' })
      .end(JSON.stringify({ errors: [{ message: id.error, extensions: { code: 'UNAUTHENTICATED' } }] }));
    return;
  }
  const [out, init] = await handler({
    method: req.method,
    url: url.pathname + url.search,
    headers: { get: (name) => req.headers[name.toLowerCase()] ?? null },
    body,
    raw: req,
    context: id,
  });
  const headers = { ...init.headers };
  if (out?.includes('"RATE_LIMITED"')) headers['Retry-After'] = '1';
  let answer = out;
  if (init.status === 200 && out) {
    const parsed = JSON.parse(out);
    if (parsed.data) {
      parsed.extensions = { ...parsed.extensions, cost: { requested: 1, actual: 1, remaining: 999, capacity: 1000, restoreRate: 100 } };
      answer = JSON.stringify(parsed);
    }
  }
  res.writeHead(init.status, init.statusText, headers).end(answer);
});

const wss = new WebSocketServer({
  server,
  path: '/query',
  verifyClient: ({ origin }, done) => done(!origin || allowed.includes(origin), 403),
});
useServer({
  schema,
  roots: { subscription: subscriptionRoot },
  onConnect: (ctx) => {
    const id = identity(ctx.connectionParams?.Authorization);
    if (id.error) {
      ctx.extra.socket.close(4401, `Unauthorized: ${id.error}`);
      return false;
    }
    return true;
  },
}, wss);

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  console.log(`http://127.0.0.1:${server.address().port}/query`);
});
