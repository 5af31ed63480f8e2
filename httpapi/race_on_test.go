//go:build race

package httpapi_test

// costFactor scales the CPU bounds of cost tests: the race detector makes
// the same work 5–10 times slower. memFactor scales their allocation
// bounds: instrumented code keeps fewer values on the stack (a 22 KB
// hostile query allocates 943 KB with it, 788 KB without).
const (
	costFactor = 10
	memFactor  = 2
)
