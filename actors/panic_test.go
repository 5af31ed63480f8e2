package actors_test

import (
	"strconv"
	"testing"
	"time"

	"flashsale/actors"
)

// An actor whose handler panics (here: every sale's notice panics, as a
// node's did while its live stock was not built yet) is replaced by a new
// activation, never restarted by protoactor on its old state: protoactor
// restarted it ten times in ten seconds and then stopped it while the
// router kept sending it grabs, so every later grab of the segment waited
// out its deadline and answered UNAVAILABLE, for minutes.
func TestAPanickingActorIsReplacedNotRestarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.live(t, 40, 1)
	r := e.router(t, nil, actors.Options{
		GrabTimeout: time.Second,
		Sold:        func(int64) { panic("live stock is not built yet") },
	})
	for u := int64(1); u <= 30; u++ {
		mustSell(t, r, id, u)
	}
	if left, err := e.rdb.Get(t.Context(), "{v"+strconv.FormatInt(id, 10)+"}:stock").Int(); err != nil || left != 10 {
		t.Fatalf("%d units left in Redis (%v), want 10", left, err)
	}
}
