//go:build !race

package httpapi_test

// costFactor and memFactor scale the bounds of cost tests (see
// race_on_test.go).
const (
	costFactor = 1
	memFactor  = 1
)
