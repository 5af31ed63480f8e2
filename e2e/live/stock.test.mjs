// stockChanged through the real graphql-ws client: subscribe on one node,
// grab through HTTP on another, and see remaining fall N -> N-GRABS (first
// event at once, last = final), while a subscriber that stops reading
// delays no one. Run by graph/live_node_test.go, which starts the nodes
// and passes them in the environment.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run through go test ./graph -run GraphQLWSClient)`);
  return v;
};
const wsURL = env('WS_URL');
const httpURL = env('HTTP_URL');
const voucherID = env('VOUCHER_ID');
const stock = Number(env('STOCK'));
const token = env('TOKEN');
const grabTokens = JSON.parse(env('GRAB_TOKENS'));
const final = stock - grabTokens.length;
const query = 'subscription($v: ID!) { stockChanged(voucherId: $v) { remaining soldOut } }';

const fail = (msg) => {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
};
const within = (ms, promise, what) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms))]);

// subscriber follows stockChanged through graphql-ws until the final level.
function subscriber() {
  const client = createClient({
    url: wsURL,
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  const s = { client, events: [], started: Date.now() };
  let gotFirst, gotFinal, failed;
  s.first = new Promise((resolve) => (gotFirst = resolve));
  s.final = new Promise((resolve, reject) => {
    gotFinal = resolve;
    failed = reject;
  });
  client.subscribe(
    { query, variables: { v: voucherID } },
    {
      next: ({ data, errors }) => {
        if (errors) return failed(new Error(JSON.stringify(errors)));
        const e = { remaining: data.stockChanged.remaining, soldOut: data.stockChanged.soldOut, at: Date.now() };
        s.events.push(e);
        if (s.events.length === 1) gotFirst(e);
        if (e.remaining === final) gotFinal(e);
      },
      error: (err) => failed(err instanceof Error ? err : new Error(JSON.stringify(err))),
      complete: () => failed(new Error('completed before the final level')),
    },
  );
  return s;
}

// stuckSubscriber subscribes over a raw socket, takes the first event,
// then stops reading from the socket for good.
async function stuckSubscriber() {
  const ws = new WebSocket(wsURL, 'graphql-transport-ws');
  const messages = [];
  let wake = () => {};
  ws.on('message', (raw) => {
    messages.push(JSON.parse(raw.toString()));
    wake();
  });
  const next = async (type) => {
    for (;;) {
      const i = messages.findIndex((m) => m.type === type);
      if (i >= 0) return messages.splice(i, 1)[0];
      await within(3000, new Promise((resolve) => (wake = resolve)), `stuck subscriber waiting for ${type}`);
    }
  };
  await within(3000, new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); }), 'stuck subscriber open');
  ws.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: `Bearer ${token}` } }));
  await next('connection_ack');
  for (let i = 0; i < 32; i++) {
    ws.send(JSON.stringify({ id: `s${i}`, type: 'subscribe', payload: { query, variables: { v: voucherID } } }));
  }
  await next('next');
  ws._socket.pause(); // no more reads: the server's writes to it back up
  return ws;
}

async function grab(t) {
  const res = await fetch(httpURL, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${t}` },
    body: JSON.stringify({ query: 'mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }', variables: { v: voucherID } }),
  });
  const body = await res.json();
  if (body.errors || body.data.seckillVoucher.code !== 'OK') throw new Error(`grab: ${JSON.stringify(body)}`);
}

try {
  const stuck = await stuckSubscriber();
  const subs = [subscriber(), subscriber()];
  for (const s of subs) {
    const first = await within(1000, s.first, 'first event');
    if (first.remaining !== stock) fail(`first event remaining ${first.remaining}, want ${stock}`);
    s.firstAfter = first.at - s.started;
  }
  for (const t of grabTokens) {
    await grab(t);
    await new Promise((resolve) => setTimeout(resolve, 30));
  }
  const grabbed = Date.now();
  const report = [];
  for (const s of subs) {
    const last = await within(2000, s.final, `final level ${final}`);
    const rs = s.events.map((e) => e.remaining);
    for (let i = 1; i < rs.length; i++) if (rs[i] >= rs[i - 1]) fail(`events do not fall: ${rs}`);
    if (last !== s.events[s.events.length - 1]) fail(`events after the final level: ${rs}`);
    report.push({ firstAfterMs: s.firstAfter, events: rs, lastAfterGrabsMs: last.at - grabbed });
    if (last.at - grabbed > 1000) fail(`final level ${last.at - grabbed} ms after the last grab`);
  }
  console.log(JSON.stringify({ ok: true, stock, final, subscribers: report }));
  stuck.terminate();
  await Promise.all(subs.map((s) => s.client.dispose()));
  process.exit(0);
} catch (err) {
  fail(err.stack || String(err));
}
