//go:build !race

package graph_test

// costFactor scales the CPU bounds of cost tests (see race_on_test.go).
const costFactor = 1
