// Package playground serves a GraphiQL page whose JavaScript and CSS are
// embedded in the binary, so the playground works offline and the page
// loads nothing from a CDN or any other host.
//
// It has two handlers: Handler serves the page at whatever path it is
// mounted, and Assets serves the files the page links to, under the fixed
// path AssetsPath. With Go 1.22 mux patterns:
//
//	mux.Handle("GET /{$}", playground.Handler("flashsale", "/query"))
//	mux.Handle("GET "+playground.AssetsPath, playground.Assets())
//
// ("GET /playground/" works as well as the second pattern: Assets answers
// 404 for anything outside AssetsPath.) Assets must see the full request
// path, so it is not to be wrapped in http.StripPrefix.
//
// Asset URLs carry a hash of their content (graphiql.min.<hash>.js), so they
// are served as immutable and cached for a year, and an upgrade changes the
// URLs; the page itself is revalidated on every load (ETag). The page sends a
// Content-Security-Policy that allows scripts and styles from its own origin
// only; connections may go to its own origin, the endpoint's, and any
// websocket (see contentSecurityPolicy for why).
//
// Authentication: the headers editor starts as
// {"Authorization": "Bearer <paste token>"}. GraphiQL sends its JSON as HTTP
// headers on queries and mutations and, for a subscription, as the
// graphql-transport-ws connection_init payload, so one pasted token serves
// both. The headers are kept in the browser's localStorage across reloads
// ("Clear storage" in GraphiQL's settings forgets them).
//
// The vendored files in assets/ come from scripts/update-playground.sh,
// which pins their versions (listed in assets/VERSIONS); assets/playground.js
// (which starts GraphiQL) and assets/favicon.svg are this package's own.
package playground

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"flashsale/httpapi/hashed"
)

// AssetsPath is where Assets must be mounted: the page links to its files
// by absolute URL under this path, so that the page can be mounted anywhere.
const AssetsPath = "/playground/assets/"

//go:embed assets
var embedded embed.FS

// assets are the page's files, served under AssetsPath by their content
// hash.
var assets = hashed.MustLoad(embedded, "assets", AssetsPath)

// Assets returns the handler for the page's JavaScript and CSS; mount it at
// AssetsPath (see the package comment). Unknown paths, including a file's
// name without its content hash, get 404 so a stale URL never receives
// content it was not cached with.
func Assets() http.Handler { return assets }

// Option sets what the page opens with.
type Option func(*pageData)

// WithQuery opens the editor with query (GraphiQL's defaultQuery) on a
// first visit; a visitor's own tabs, kept by the browser, win afterwards.
func WithQuery(query string) Option {
	return func(d *pageData) { d.Query = query }
}

// WithHeaders puts headers in the headers editor at every load (GraphiQL's
// headers prop, which replaces what the browser kept). It is meant for a
// demo token on a loopback-only service: the page hands the headers to
// anyone who can load it, so never give it a real credential.
func WithHeaders(headers map[string]string) Option {
	return func(d *pageData) {
		b, err := json.MarshalIndent(headers, "", "  ")
		if err != nil { // cannot happen for a map of strings
			panic(fmt.Errorf("playground: headers: %w", err))
		}
		d.Headers = string(b)
	}
}

// pageData is what the page template renders; Query and Headers reach
// playground.js through data- attributes (no inline script: the CSP
// forbids them).
type pageData struct {
	Title, Endpoint string
	Query, Headers  string
}

// Handler returns the playground page for a GraphQL endpoint: a path such
// as "/query" on the page's own host (the usual case; the websocket URL is
// then ws:// or wss:// on the host the browser used) or an absolute http(s)
// URL. title names the page; empty means "GraphiQL". The page's assets
// come from Assets, which must be mounted too.
func Handler(title, endpoint string, opts ...Option) http.Handler {
	if title == "" {
		title = "GraphiQL"
	}
	data := pageData{Title: title, Endpoint: endpoint}
	for _, o := range opts {
		o(&data)
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, data); err != nil {
		// Only a template bug (such as a misspelt asset name) can get here,
		// and the package's tests render the page.
		panic(fmt.Errorf("playground: render page: %w", err))
	}
	sum := sha256.Sum256(buf.Bytes())
	return &page{
		body: buf.Bytes(),
		etag: `"` + hex.EncodeToString(sum[:16]) + `"`,
		csp:  contentSecurityPolicy(endpoint),
	}
}

// page is the rendered playground page; it is rendered once, in Handler.
type page struct {
	body []byte
	etag string
	csp  string
}

func (p *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r) {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// Revalidated on each load, so a new build's asset URLs are picked up.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", p.etag)
	h.Set("Content-Security-Policy", p.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(p.body))
}

// contentSecurityPolicy allows the page's own scripts and styles and no
// others. Inline styles stay allowed because GraphiQL's dialogs insert
// <style> elements; fonts and icons in graphiql.min.css are data: URLs.
// Websockets are allowed to any host (ws: wss:) because the page derives
// the websocket URL from the host the browser used, which the server cannot
// know behind a proxy, and because older Safari does not count ws: as 'self'.
func contentSecurityPolicy(endpoint string) string {
	connect := "'self' ws: wss:"
	if u, err := url.Parse(endpoint); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		connect += " " + u.Scheme + "://" + u.Host
	}
	return strings.Join([]string{
		"default-src 'none'",
		"script-src 'self'",
		"style-src 'self' 'unsafe-inline'",
		"img-src 'self' data:",
		"font-src 'self' data:",
		"connect-src " + connect,
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
}

// allowMethod answers 405 to anything but GET and HEAD, for callers that
// mount the handlers without a method in the pattern.
func allowMethod(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
	return false
}

// pageTemplate links every asset through assetURL, which fails the render
// for a name not in assets/, so a typo cannot ship a page with a dead link.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"asset": assets.URL,
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<link rel="icon" href="{{asset "favicon.svg"}}">
<link rel="stylesheet" href="{{asset "graphiql.min.css"}}">
<style>html,body{height:100%;margin:0}#graphiql{height:100vh}</style>
</head>
<body>
<div id="graphiql" data-endpoint="{{.Endpoint}}" data-title="{{.Title}}"{{with .Query}} data-query="{{.}}"{{end}}{{with .Headers}} data-headers="{{.}}"{{end}}>Loading GraphiQL…</div>
<noscript>The GraphiQL playground needs JavaScript.</noscript>
<script src="{{asset "react.production.min.js"}}"></script>
<script src="{{asset "react-dom.production.min.js"}}"></script>
<script src="{{asset "graphiql.min.js"}}"></script>
<script src="{{asset "playground.js"}}"></script>
</body>
</html>
`))
