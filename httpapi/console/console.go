// Package console serves the operators' console: a page of plain HTML,
// CSS and JavaScript embedded in the binary (no build step, nothing from
// a CDN, so it works offline), a client of the node's own GraphQL API and
// its subscriptions. An admin signs in with an admin token, which the
// page keeps in the tab's sessionStorage only; a user's token is refused
// by the API (FORBIDDEN on the admin fields) and the page says so.
//
// Mount both handlers (Go 1.22 patterns):
//
//	mux.Handle("GET /console", console.Handler("/query"))
//	mux.Handle("GET "+console.AssetsPath, console.Assets())
//
// Asset URLs carry a hash of their content, so they are cached for a year
// and an upgrade changes them; the page is revalidated on every load. The
// page's Content-Security-Policy allows scripts and styles from its own
// origin only, no inline script or style, and connections to its own
// origin and websockets: the page writes every text it shows through
// textContent, never as HTML, and the policy stops a script that slipped
// in anyway.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"flashsale/httpapi/hashed"
)

// AssetsPath is where Assets must be mounted.
const AssetsPath = "/console/assets/"

//go:embed assets
var embedded embed.FS

// assets are the page's files, served under AssetsPath by their content
// hash.
var assets = hashed.MustLoad(embedded, "assets", AssetsPath)

// Assets serves the page's files under AssetsPath; any other path, a
// file's name without its hash among them, is 404.
func Assets() http.Handler { return assets }

// ContentSecurityPolicy is the page's policy: its own scripts and styles
// only (no inline ones), connections to its own origin and websockets
// (the page derives the websocket URL from the host the browser used,
// which the server cannot know behind a proxy).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns the console page for the GraphQL endpoint (a path on
// the page's own host, such as "/query").
func Handler(endpoint string) http.Handler {
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, endpoint); err != nil {
		panic(fmt.Errorf("console: render page: %w", err)) // a template bug; the tests render it
	}
	sum := sha256.Sum256(buf.Bytes())
	body, etag := buf.Bytes(), `"`+hex.EncodeToString(sum[:16])+`"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{"asset": assets.URL}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flashsale console</title>
<link rel="icon" href="{{asset "favicon.svg"}}">
<link rel="stylesheet" href="{{asset "console.css"}}">
</head>
<body data-endpoint="{{.}}">
<header>
  <h1>flashsale console</h1>
  <nav id="tabs" hidden>
    <button data-tab="live" class="on">Live sale</button>
    <button data-tab="vouchers">Vouchers</button>
    <button data-tab="orders">Orders</button>
    <button data-tab="dead">Dead letters</button>
    <button data-tab="blocks">Blocks</button>
    <button data-tab="cluster">Cluster</button>
  </nav>
  <button id="signout" hidden>Sign out</button>
</header>
<main>
  <section id="signin">
    <h2>Sign in</h2>
    <p>Paste an admin token (<code>go run . token --user 1 --role admin</code>). It is kept in this tab only.</p>
    <input id="token" type="password" autocomplete="off" placeholder="admin token" size="60">
    <button id="signin-go">Sign in</button>
    <p id="signin-msg" class="msg" role="alert"></p>
  </section>

  <section id="live" class="tab" hidden>
    <div class="row">
      <label>Voucher <select id="live-voucher"></select></label>
      <button id="live-watch">Watch</button>
      <span id="live-state" class="muted"></span>
    </div>
    <div id="live-figures" class="figures"></div>
    <div class="charts">
      <figure><figcaption>Remaining stock</figcaption><svg id="chart-stock" viewBox="0 0 400 150"></svg></figure>
      <figure><figcaption>Grabs a second, by answer</figcaption><svg id="chart-grabs" viewBox="0 0 400 150"></svg><div id="legend-grabs" class="legend"></div></figure>
      <figure><figcaption>Grab latency, ms (p50, p99)</figcaption><svg id="chart-latency" viewBox="0 0 400 150"></svg><div id="legend-latency" class="legend"></div></figure>
      <figure><figcaption>Orders sold and stored (the writer's lag)</figcaption><svg id="chart-orders" viewBox="0 0 400 150"></svg><div id="legend-orders" class="legend"></div></figure>
      <figure id="fig-room" hidden><figcaption>Waiting room</figcaption><svg id="chart-room" viewBox="0 0 400 150"></svg><div id="legend-room" class="legend"></div></figure>
    </div>
  </section>

  <section id="vouchers" class="tab" hidden>
    <h2>Create a seckill voucher</h2>
    <div class="row">
      <label>Title <input id="nv-title" value="Flash sale"></label>
      <label>Stock <input id="nv-stock" type="number" value="100" min="1"></label>
      <label>Per user <input id="nv-limit" type="number" value="1" min="1"></label>
      <label>Begins in (s) <input id="nv-begin" type="number" value="0" min="0"></label>
      <label>Lasts (min) <input id="nv-mins" type="number" value="60" min="1"></label>
      <label><input id="nv-room" type="checkbox"> Waiting room</label>
      <button id="nv-go">Create</button>
    </div>
    <p id="vouchers-msg" class="msg" role="alert"></p>
    <h2>Vouchers</h2>
    <table id="voucher-table"><thead><tr>
      <th>Id</th><th>Title</th><th>Status</th><th>Stock</th><th>Begins</th><th>Gate</th><th>Actions</th>
    </tr></thead><tbody></tbody></table>
  </section>

  <section id="orders" class="tab" hidden>
    <div class="row">
      <label>User id <input id="ord-user" size="10"></label><button id="ord-user-go">Orders of the user</button>
      <label>Order id <input id="ord-id" size="22"></label><button id="ord-id-go">Find the order</button>
    </div>
    <p id="orders-msg" class="msg" role="alert"></p>
    <table id="order-table"><thead><tr>
      <th>Order</th><th>User</th><th>Voucher</th><th>Status</th><th>Created</th><th>Paid</th><th>Cancelled</th><th>Pay by</th>
    </tr></thead><tbody></tbody></table>
  </section>

  <section id="dead" class="tab" hidden>
    <p class="muted">Orders Redis accepted and the database refused for good, with the reason. The API replays none (each
    was refused by a rule of the database: a second order past the limit, past the stock...); what it allows is a
    reconciliation of the voucher, with repair, which rebuilds Redis from the database.</p>
    <div class="row"><button id="dead-refresh">Refresh</button></div>
    <p id="dead-msg" class="msg" role="alert"></p>
    <table id="dead-table"><thead><tr>
      <th>Entry</th><th>Order</th><th>User</th><th>Voucher</th><th>Reason</th><th>Detail</th><th>At</th><th></th>
    </tr></thead><tbody></tbody></table>
    <pre id="dead-report"></pre>
  </section>

  <section id="blocks" class="tab" hidden>
    <div class="row">
      <label>User id <input id="blk-user" size="10"></label>
      <label>or IP / CIDR <input id="blk-ip" size="18"></label>
      <label>Voucher (empty: every) <input id="blk-voucher" size="8"></label>
      <label>For (s, empty: until removed) <input id="blk-exp" type="number" min="1" size="8"></label>
      <button id="blk-go">Block</button>
    </div>
    <p id="blocks-msg" class="msg" role="alert"></p>
    <table id="block-table"><thead><tr><th>User</th><th>IP</th><th>Voucher</th><th>Until</th><th></th></tr></thead><tbody></tbody></table>
  </section>

  <section id="cluster" class="tab" hidden>
    <p class="muted">Every node reports itself once a second; a node not heard from for 5 s is gone from the list.</p>
    <p id="cluster-msg" class="msg" role="alert"></p>
    <table id="cluster-table"><thead><tr>
      <th>Node</th><th>HTTP</th><th>Member</th><th>Segments hosted</th><th>Redis</th><th>Primaries</th><th>Acks</th><th>Held</th><th>Reported</th>
    </tr></thead><tbody></tbody></table>
  </section>
</main>
<script src="{{asset "console.js"}}"></script>
</body>
</html>
`))
