//go:build race

package graph_test

// raceEnabled: the race detector's instrumentation allocates two to three
// times what the code does, so allocation bounds are checked without it
// (the test command runs them in its step without -race).
const raceEnabled = true
