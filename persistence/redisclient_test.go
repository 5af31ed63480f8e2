package persistence_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// A client of the stock Redis whose dials were refused more often in a row
// than its pool holds connections serves the first call made once Redis
// is back. Left to itself, go-redis's pool would answer that call with
// the last dial error and dial again only once a second (a failover
// round then refused grabs for up to a second after the new primary
// served). A refused call still says the connection was refused, which
// is what proves it was not sent.
func TestAClientServesAtOnceOnceRedisIsBackAfterManyRefusedDials(t *testing.T) {
	srv := testenv.MustRedis(t)
	target := persistence.SingleTarget(redis.Options{Addr: srv.Addr()})
	tunings := map[string]persistence.ClientTuning{
		"request path": persistence.RequestTuning(time.Second),
		"background":   persistence.BackgroundTuning(),
	}
	clients := map[string]redis.UniversalClient{}
	for name, tu := range tunings {
		tu.PoolSize, tu.MinIdleConns, tu.DialerRetries = 2, 0, 1
		rdb := target.Client(tu)
		t.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.Ping(t.Context()).Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		clients[name] = rdb
	}

	srv.Kill()
	for name, rdb := range clients {
		for i := range 10 {
			err := rdb.Ping(t.Context()).Err()
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s: call %d to a Redis that is down: %v, want a refused connection", name, i, err)
			}
		}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for name, rdb := range clients {
		if err := rdb.Ping(t.Context()).Err(); err != nil {
			t.Errorf("%s: the first call once Redis is back: %v", name, err)
		}
	}
}
