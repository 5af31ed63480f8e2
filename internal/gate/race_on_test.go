//go:build race

package gate

// raceEnabled: the race detector slows every memory access several-fold,
// so CPU budgets are not asserted under it.
const raceEnabled = true
