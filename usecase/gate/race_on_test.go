//go:build race

package gate

// raceEnabled: the race detector changes allocation counts (sync.Pool
// drops items at random under it), so they are not asserted under it.
const raceEnabled = true
