//go:build race

package graph_test

// costFactor scales the CPU bounds of cost tests: the race detector makes
// the same work 5–10 times slower.
const costFactor = 10
