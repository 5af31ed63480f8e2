// Package httpapi serves the GraphQL API (package graph) over HTTP: the
// /query handler with its request guard, the compiled grab path and its
// body scanner, admission before parsing (flood and per-IP limits, the
// anonymous budget, load shedding, the document cache), the limits on a
// document's shape and depth, and the websocket transport with its caps;
// and around it the whole HTTP surface of a node, built alike by the node
// and the tests: the routes (Routes: /query, the playground, /healthz,
// /readyz, /metrics, embedded mode's Host guard), /readyz itself
// (Readiness) and the server with each request's deadlines (NewServer).
// It imports graph; graph never imports it.
package httpapi
