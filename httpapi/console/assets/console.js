// console.js: the operators' console, a client of the node's GraphQL API
// (queries and mutations over HTTP, subscriptions over graphql-ws). Every
// text from the API reaches the page through textContent or an SVG
// attribute, never as HTML.
(function () {
  'use strict';

  var endpoint = new URL(document.body.dataset.endpoint, window.location.href);
  var wsURL = new URL(endpoint.href);
  wsURL.protocol = endpoint.protocol === 'https:' ? 'wss:' : 'ws:';
  var TOKEN_KEY = 'flashsale.console.token';
  var token = sessionStorage.getItem(TOKEN_KEY) || '';

  function $(id) { return document.getElementById(id); }

  // el builds an element: attrs are properties or attributes, children
  // strings (made text nodes) or nodes.
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === 'text') { e.textContent = attrs[k]; }
      else if (k === 'on') { Object.keys(attrs.on).forEach(function (ev) { e.addEventListener(ev, attrs.on[ev]); }); }
      else if (k in e && typeof attrs[k] !== 'string') { e[k] = attrs[k]; }
      else { e.setAttribute(k, attrs[k]); }
    });
    (children || []).forEach(function (c) {
      e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    });
    return e;
  }

  function show(id, text, ok) {
    var m = $(id);
    m.textContent = text || '';
    m.className = 'msg' + (ok ? ' ok' : '');
  }

  // gql posts one operation; it resolves with data, or rejects with an
  // Error whose code is the first error's extensions.code.
  function gql(query, variables) {
    return fetch(endpoint.href, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token },
      body: JSON.stringify({ query: query, variables: variables || {} })
    }).then(function (r) {
      return r.json().catch(function () { throw new Error('the service answered ' + r.status); });
    }).then(function (out) {
      if (out.errors && out.errors.length) {
        var e = new Error(out.errors[0].message);
        e.code = (out.errors[0].extensions || {}).code || '';
        throw e;
      }
      return out.data;
    });
  }

  function errText(e) { return (e.code ? e.code + ': ' : '') + e.message; }

  function fmtTime(s) { return s ? new Date(s).toLocaleString() : ''; }

  // ---- sign in ----

  function signIn(t) {
    token = t;
    // blocks is an admin field: a user's token is FORBIDDEN there.
    return gql('{ blocks { userId } }').then(function () {
      sessionStorage.setItem(TOKEN_KEY, token);
      $('signin').hidden = true;
      $('tabs').hidden = false;
      $('signout').hidden = false;
      document.body.classList.add('signed-in');
      openTab('live');
    }).catch(function (e) {
      token = '';
      sessionStorage.removeItem(TOKEN_KEY);
      var text = errText(e);
      if (e.code === 'FORBIDDEN') {
        text = 'Refused: this token is not an admin\'s. The console needs an admin token (go run . token --user 1 --role admin).';
      } else if (e.code === 'UNAUTHENTICATED') {
        text = 'Refused: the token is not valid (malformed, expired or signed with another secret).';
      }
      show('signin-msg', text);
    });
  }

  $('signin-go').addEventListener('click', function () { signIn($('token').value.trim()); });
  $('token').addEventListener('keydown', function (ev) { if (ev.key === 'Enter') { signIn($('token').value.trim()); } });
  $('signout').addEventListener('click', function () {
    sessionStorage.removeItem(TOKEN_KEY);
    window.location.reload();
  });

  // ---- tabs ----

  var current = '';
  var refreshers = {};
  var ticker = null;

  function openTab(name) {
    current = name;
    Array.prototype.forEach.call(document.querySelectorAll('section.tab'), function (s) { s.hidden = s.id !== name; });
    Array.prototype.forEach.call(document.querySelectorAll('#tabs button'), function (b) {
      b.className = b.dataset.tab === name ? 'on' : '';
    });
    if (refreshers[name]) { refreshers[name](); }
  }
  Array.prototype.forEach.call(document.querySelectorAll('#tabs button'), function (b) {
    b.addEventListener('click', function () { openTab(b.dataset.tab); });
  });

  // ---- graphql-ws (graphql-transport-ws) for one subscription ----

  function subscribe(query, variables, onNext, onEnd) {
    var ws = new WebSocket(wsURL.href, 'graphql-transport-ws');
    var ended = false;
    function end(why) {
      if (!ended) { ended = true; onEnd(why); }
    }
    ws.onopen = function () {
      ws.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: 'Bearer ' + token } }));
    };
    ws.onmessage = function (ev) {
      var m = JSON.parse(ev.data);
      if (m.type === 'connection_ack') {
        ws.send(JSON.stringify({ id: '1', type: 'subscribe', payload: { query: query, variables: variables } }));
      } else if (m.type === 'ping') {
        ws.send(JSON.stringify({ type: 'pong' }));
      } else if (m.type === 'next') {
        if (m.payload.errors && m.payload.errors.length) {
          end(m.payload.errors[0].message);
          ws.close();
          return;
        }
        onNext(m.payload.data);
      } else if (m.type === 'error') {
        end((m.payload[0] || {}).message || 'refused');
        ws.close();
      } else if (m.type === 'complete') {
        end('ended');
        ws.close();
      }
    };
    ws.onclose = function (ev) { end('closed (' + ev.code + (ev.reason ? ' ' + ev.reason : '') + ')'); };
    return { close: function () { ended = true; ws.close(); } };
  }

  // ---- charts: SVG paths over the last 60 points ----

  var SVGNS = 'http://www.w3.org/2000/svg';
  var W = 400, H = 150, PAD = 28, KEEP = 60;
  var COLORS = ['#2a7', '#d62', '#96c', '#c93', '#888', '#e44', '#39c', '#7a4', '#b6b', '#555'];

  function svg(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }

  // draw plots series ([{name, values}]) on the svg; each line is a
  // path.line with data-points (the test reads them).
  function draw(svgEl, legendEl, series) {
    while (svgEl.firstChild) { svgEl.removeChild(svgEl.firstChild); }
    var maxV = 1;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v != null && v > maxV) { maxV = v; } }); });
    svgEl.appendChild(svg('line', { x1: PAD, y1: H - 14, x2: W, y2: H - 14, class: 'axis' }));
    svgEl.appendChild(svg('line', { x1: PAD, y1: 4, x2: PAD, y2: H - 14, class: 'axis' }));
    var top = svg('text', { x: 2, y: 12, class: 'tick' });
    top.textContent = String(Math.round(maxV * 100) / 100);
    svgEl.appendChild(top);
    var zero = svg('text', { x: 2, y: H - 14, class: 'tick' });
    zero.textContent = '0';
    svgEl.appendChild(zero);
    if (legendEl) { while (legendEl.firstChild) { legendEl.removeChild(legendEl.firstChild); } }
    series.forEach(function (s, i) {
      var color = s.color || COLORS[i % COLORS.length];
      var d = '', n = 0;
      s.values.forEach(function (v, j) {
        if (v == null) { return; }
        var x = PAD + (W - PAD) * (j + KEEP - s.values.length) / (KEEP - 1);
        var y = (H - 14) - (H - 20) * v / maxV;
        d += (n === 0 ? 'M' : 'L') + x.toFixed(1) + ' ' + y.toFixed(1);
        n++;
      });
      var p = svg('path', { d: d || 'M0 0', class: 'line', stroke: color, 'data-series': s.name, 'data-points': String(n) });
      svgEl.appendChild(p);
      if (legendEl) {
        var sw = el('span', { class: 'swatch' });
        sw.style.background = color;
        legendEl.appendChild(el('span', { class: 'key' }, [sw, s.name + ' ' + (s.values.length ? fmtNum(s.values[s.values.length - 1]) : '')]));
      }
    });
  }

  function fmtNum(v) { return v == null ? '–' : String(Math.round(v * 100) / 100); }

  // ---- live sale ----

  var live = null;     // the open subscription
  var points = [];     // the last KEEP events

  var SALE = 'subscription($v: ID!) { saleStats(voucherId: $v) { voucherId at second grabs { code count } grabsTotal ' +
    'p50Ms p99Ms nodes remaining sold stored answeredOk waiting admitted } }';

  function watch(voucherId) {
    if (live) { live.close(); }
    points = [];
    redraw();
    $('live-state').textContent = 'connecting…';
    live = subscribe(SALE, { v: voucherId }, function (data) {
      points.push(data.saleStats);
      if (points.length > KEEP) { points.shift(); }
      $('live-state').textContent = 'live: ' + points.length + ' updates';
      redraw();
    }, function (why) {
      $('live-state').textContent = 'stopped: ' + why;
    });
  }

  function redraw() {
    var last = points[points.length - 1];
    var figs = $('live-figures');
    while (figs.firstChild) { figs.removeChild(figs.firstChild); }
    if (last) {
      [['remaining', last.remaining], ['sold', last.sold], ['stored', last.stored], ['writer lag', last.sold - last.stored],
        ['answered OK', last.answeredOk], ['grabs/s', last.grabsTotal], ['p50 ms', fmtNum(last.p50Ms)],
        ['p99 ms', fmtNum(last.p99Ms)], ['nodes reporting', last.nodes]].forEach(function (f) {
        figs.appendChild(el('div', { class: 'figure' }, [el('b', { text: String(f[1]) }), el('span', { text: f[0] })]));
      });
    }
    draw($('chart-stock'), null, [{ name: 'remaining', values: points.map(function (p) { return p.remaining; }) }]);
    var codes = [];
    points.forEach(function (p) {
      p.grabs.forEach(function (g) { if (g.count > 0 && codes.indexOf(g.code) < 0) { codes.push(g.code); } });
    });
    if (codes.length === 0) { codes = ['OK']; }
    draw($('chart-grabs'), $('legend-grabs'), codes.map(function (c) {
      return {
        name: c, values: points.map(function (p) {
          var g = p.grabs.filter(function (x) { return x.code === c; })[0];
          return g ? g.count : 0;
        })
      };
    }));
    draw($('chart-latency'), $('legend-latency'), [
      { name: 'p50', values: points.map(function (p) { return p.p50Ms; }) },
      { name: 'p99', values: points.map(function (p) { return p.p99Ms; }) }]);
    draw($('chart-orders'), $('legend-orders'), [
      { name: 'sold', values: points.map(function (p) { return p.sold; }) },
      { name: 'stored', values: points.map(function (p) { return p.stored; }) },
      { name: 'answered OK', values: points.map(function (p) { return p.answeredOk; }) }]);
    var room = last && last.waiting != null;
    $('fig-room').hidden = !room;
    if (room) {
      draw($('chart-room'), $('legend-room'), [
        { name: 'waiting', values: points.map(function (p) { return p.waiting; }) },
        { name: 'admitted', values: points.map(function (p) { return p.admitted; }) }]);
    }
  }

  $('live-watch').addEventListener('click', function () {
    var v = $('live-voucher').value;
    if (v) { watch(v); }
  });

  function fillVoucherPicker(vouchers) {
    var sel = $('live-voucher');
    var keep = sel.value;
    while (sel.firstChild) { sel.removeChild(sel.firstChild); }
    vouchers.filter(function (v) { return v.seckill; }).forEach(function (v) {
      sel.appendChild(el('option', { value: v.id, text: v.id + ' · ' + v.title }));
    });
    if (keep) { sel.value = keep; }
  }

  var VOUCHERS = '{ serverTime vouchers(first: 100) { edges { node { id title status type seckill { remaining initialStock ' +
    'beginAt endAt requireTicket challenge waitingRoom } } } } }';
  var clockOffset = 0; // server time minus the browser's, ms
  var voucherRows = [];

  function loadVouchers() {
    return gql(VOUCHERS).then(function (d) {
      clockOffset = new Date(d.serverTime).getTime() - Date.now();
      var vs = d.vouchers.edges.map(function (e) { return e.node; });
      vs.sort(function (a, b) { return Number(b.id) - Number(a.id); });
      fillVoucherPicker(vs);
      return vs;
    });
  }
  refreshers.live = function () { loadVouchers().catch(function (e) { $('live-state').textContent = errText(e); }); };

  // ---- vouchers ----

  function countdown(v) {
    if (!v.seckill) { return ''; }
    var now = Date.now() + clockOffset;
    var begin = new Date(v.seckill.beginAt).getTime(), end = new Date(v.seckill.endAt).getTime();
    function span(ms) {
      var s = Math.max(0, Math.round(ms / 1000));
      var h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
      return (h ? h + 'h ' : '') + (h || m ? m + 'm ' : '') + (s % 60) + 's';
    }
    if (now < begin) { return 'begins in ' + span(begin - now); }
    if (now < end) { return 'on sale, ends in ' + span(end - now); }
    return 'ended';
  }

  function mutate(msgId, query, vars, done) {
    return gql(query, vars).then(function (d) {
      show(msgId, done, true);
      return refreshers[current] && refreshers[current]();
    }).catch(function (e) { show(msgId, errText(e)); });
  }

  function voucherRow(v) {
    var sk = v.seckill;
    var actions = el('td', { class: 'actions' });
    if (v.status !== 'ENDED') {
      var next = v.status === 'PAUSED' ? 'ACTIVE' : 'PAUSED';
      actions.appendChild(el('button', {
        class: 'status', text: v.status === 'PAUSED' ? 'Resume' : 'Pause', on: {
          click: function () {
            mutate('vouchers-msg', 'mutation($id: ID!, $s: VoucherStatus!) { setVoucherStatus(id: $id, status: $s) { id status } }',
              { id: v.id, s: next }, 'Voucher ' + v.id + (next === 'PAUSED' ? ' paused.' : ' resumed.'));
          }
        }
      }));
    }
    if (sk && v.status !== 'ENDED') {
      var amount = el('input', { type: 'number', min: '1', value: '10', class: 'restock-amount', size: '6' });
      actions.appendChild(amount);
      actions.appendChild(el('button', {
        class: 'restock', text: 'Restock', on: {
          click: function () {
            mutate('vouchers-msg', 'mutation($v: ID!, $n: Int!) { addStock(voucherId: $v, amount: $n) { remaining } }',
              { v: v.id, n: Number(amount.value) }, 'Voucher ' + v.id + ': ' + amount.value + ' units added.');
          }
        }
      }));
      var ticket = el('input', { type: 'checkbox', class: 'gate-ticket' });
      ticket.checked = sk.requireTicket;
      var challenge = el('select', { class: 'gate-challenge' }, [el('option', { value: 'NONE', text: 'no proof of work' }),
        el('option', { value: 'POW', text: 'proof of work' })]);
      challenge.value = sk.challenge;
      actions.appendChild(el('label', { title: 'Only while paused' }, [ticket, ' tickets']));
      actions.appendChild(challenge);
      actions.appendChild(el('button', {
        class: 'gate', text: 'Set gate', title: 'The gate changes only while the voucher is paused', on: {
          click: function () {
            mutate('vouchers-msg', 'mutation($id: ID!, $t: Boolean, $c: ChallengeKind) { setVoucherGate(id: $id, requireTicket: $t, challenge: $c) { id } }',
              { id: v.id, t: ticket.checked, c: challenge.value }, 'Voucher ' + v.id + ': gate changed.');
          }
        }
      }));
    }
    var cd = el('td', { class: 'countdown', text: countdown(v) });
    voucherRows.push({ v: v, td: cd });
    return el('tr', { 'data-voucher': v.id }, [
      el('td', { text: v.id }), el('td', { text: v.title }), el('td', { class: 'status-cell', text: v.status }),
      el('td', { class: 'stock-cell', text: sk ? sk.remaining + ' / ' + sk.initialStock : '' }), cd,
      el('td', { text: sk ? (sk.requireTicket ? 'tickets' : 'open') + (sk.challenge === 'POW' ? ', PoW' : '') + (sk.waitingRoom ? ', waiting room' : '') : '' }),
      actions]);
  }

  refreshers.vouchers = function () {
    return loadVouchers().then(function (vs) {
      var body = document.querySelector('#voucher-table tbody');
      while (body.firstChild) { body.removeChild(body.firstChild); }
      voucherRows = [];
      vs.forEach(function (v) { body.appendChild(voucherRow(v)); });
    }).catch(function (e) { show('vouchers-msg', errText(e)); });
  };

  $('nv-go').addEventListener('click', function () {
    var now = Date.now() + clockOffset;
    var begin = new Date(now + 1000 * Number($('nv-begin').value || 0));
    var end = new Date(begin.getTime() + 60000 * Number($('nv-mins').value || 60));
    var input = {
      shopId: '1', title: $('nv-title').value, payValue: 100, actualValue: 1000, type: 'SECKILL',
      stock: Number($('nv-stock').value), perUserLimit: Number($('nv-limit').value),
      beginAt: begin.toISOString(), endAt: end.toISOString(), waitingRoom: $('nv-room').checked
    };
    mutate('vouchers-msg', 'mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }', { in: input }, 'Voucher created.');
  });

  // ---- orders ----

  function showOrders(orders) {
    var body = document.querySelector('#order-table tbody');
    while (body.firstChild) { body.removeChild(body.firstChild); }
    orders.forEach(function (o) {
      body.appendChild(el('tr', {}, [el('td', { text: o.id }), el('td', { text: o.userId }), el('td', { text: o.voucherId }),
        el('td', { text: o.status }), el('td', { text: fmtTime(o.createdAt) }), el('td', { text: fmtTime(o.paidAt) }),
        el('td', { text: fmtTime(o.cancelledAt) }), el('td', { text: fmtTime(o.payDeadline) })]));
    });
  }
  var ORDER = 'id userId voucherId status createdAt paidAt cancelledAt payDeadline';
  $('ord-user-go').addEventListener('click', function () {
    gql('query($u: ID!) { userOrders(userId: $u, first: 100) { edges { node { ' + ORDER + ' } } } }', { u: $('ord-user').value.trim() })
      .then(function (d) {
        var os = d.userOrders.edges.map(function (e) { return e.node; });
        showOrders(os);
        show('orders-msg', os.length + ' order(s).', true);
      }).catch(function (e) { show('orders-msg', errText(e)); });
  });
  $('ord-id-go').addEventListener('click', function () {
    gql('query($id: ID!) { order(id: $id) { ' + ORDER + ' } }', { id: $('ord-id').value.trim() }).then(function (d) {
      showOrders(d.order ? [d.order] : []);
      show('orders-msg', d.order ? '' : 'No such order.', !!d.order);
    }).catch(function (e) { show('orders-msg', errText(e)); });
  });

  // ---- dead letters ----

  refreshers.dead = function () {
    return gql('{ deadLetteredOrders(first: 100) { edges { node { key orderId userId voucherId requestId reason detail at } } } }')
      .then(function (d) {
        var body = document.querySelector('#dead-table tbody');
        while (body.firstChild) { body.removeChild(body.firstChild); }
        d.deadLetteredOrders.edges.forEach(function (e) {
          var n = e.node;
          var reconcile = el('button', {
            text: 'Reconcile voucher', on: {
              click: function () {
                gql('mutation($v: ID) { reconcile(voucherId: $v) { voucherId balanced drift lines } }', { v: n.voucherId })
                  .then(function (r) {
                    $('dead-report').textContent = r.reconcile.map(function (x) {
                      return 'voucher ' + x.voucherId + ': ' + (x.balanced ? 'balanced' : 'off by ' + x.drift) + '\n  ' + x.lines.join('\n  ');
                    }).join('\n');
                  }).catch(function (err) { show('dead-msg', errText(err)); });
              }
            }
          });
          body.appendChild(el('tr', { class: 'dead-letter' }, [el('td', { text: n.key }), el('td', { text: n.orderId || '' }),
            el('td', { text: n.userId || '' }), el('td', { text: n.voucherId || '' }), el('td', { class: 'reason', text: n.reason }),
            el('td', { text: n.detail }), el('td', { text: fmtTime(n.at) }), el('td', {}, n.voucherId ? [reconcile] : [])]));
        });
        show('dead-msg', d.deadLetteredOrders.edges.length + ' dead letter(s).', true);
      }).catch(function (e) { show('dead-msg', errText(e)); });
  };
  $('dead-refresh').addEventListener('click', function () { refreshers.dead(); });

  // ---- blocks ----

  function target(b) {
    var t = {};
    if (b.userId) { t.userId = b.userId; }
    if (b.ip) { t.ip = b.ip; }
    if (b.voucherId) { t.voucherId = b.voucherId; }
    return t;
  }
  refreshers.blocks = function () {
    return gql('{ blocks { userId ip voucherId expiresAt } }').then(function (d) {
      var body = document.querySelector('#block-table tbody');
      while (body.firstChild) { body.removeChild(body.firstChild); }
      d.blocks.forEach(function (b) {
        body.appendChild(el('tr', { class: 'block' }, [el('td', { text: b.userId || '' }), el('td', { text: b.ip || '' }),
          el('td', { text: b.voucherId || 'every' }), el('td', { text: b.expiresAt ? fmtTime(b.expiresAt) : 'removed' }),
          el('td', {}, [el('button', {
            class: 'unblock', text: 'Remove', on: {
              click: function () {
                mutate('blocks-msg', 'mutation($t: BlockTarget!) { unblock(target: $t) }', { t: target(b) }, 'Block removed.');
              }
            }
          })])]));
      });
    }).catch(function (e) { show('blocks-msg', errText(e)); });
  };
  $('blk-go').addEventListener('click', function () {
    var t = target({ userId: $('blk-user').value.trim(), ip: $('blk-ip').value.trim(), voucherId: $('blk-voucher').value.trim() });
    var exp = $('blk-exp').value ? Number($('blk-exp').value) : null;
    mutate('blocks-msg', 'mutation($t: BlockTarget!, $e: Int) { block(target: $t, expiresInSeconds: $e) { userId } }', { t: t, e: exp }, 'Blocked.');
  });

  // ---- cluster ----

  refreshers.cluster = function () {
    return gql('{ clusterNodes { id httpAddr member members segments redisMode redis primaries ackReplicas ackTimeoutMs ackAof ' +
      'held { voucherId since why } at } }').then(function (d) {
      var body = document.querySelector('#cluster-table tbody');
      while (body.firstChild) { body.removeChild(body.firstChild); }
      d.clusterNodes.forEach(function (n) {
        body.appendChild(el('tr', { class: 'node' }, [el('td', { text: n.id }), el('td', { text: n.httpAddr }),
          el('td', { text: n.member ? n.member + ' (of ' + n.members.length + ')' : 'no cluster' }),
          el('td', { class: 'segments', text: n.segments.length ? n.segments.join(', ') : 'none' }),
          el('td', { text: n.redisMode + ': ' + n.redis }), el('td', { text: n.primaries.join(', ') || 'via Sentinel' }),
          el('td', { text: n.ackReplicas ? n.ackReplicas + ' replica(s) within ' + n.ackTimeoutMs + ' ms' + (n.ackAof ? ', AOF' : '') : 'primary alone' }),
          el('td', { text: n.held.length ? n.held.map(function (h) { return h.voucherId + ' since ' + fmtTime(h.since) + ': ' + h.why; }).join('; ') : 'none' }),
          el('td', { text: fmtTime(n.at) })]));
      });
      show('cluster-msg', d.clusterNodes.length + ' node(s).', true);
    }).catch(function (e) { show('cluster-msg', errText(e)); });
  };

  // Countdowns tick every second; the cluster view follows every 2 s.
  ticker = setInterval(function () {
    voucherRows.forEach(function (r) { r.td.textContent = countdown(r.v); });
    if (current === 'cluster' && Date.now() % 2000 < 1000) { refreshers.cluster(); }
  }, 1000);

  if (token) { signIn(token); }
})();
