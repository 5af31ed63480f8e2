//go:build !race

package graph_test

// costFactor and memFactor scale the bounds of cost tests (see
// race_on_test.go).
const (
	costFactor = 1
	memFactor  = 1
)
