package persistence_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// A DATABASE_URL that points at a Redis port fails at once, saying so:
// it waited 5 s for the ping's deadline, and its error spoke of TLS.
func TestADatabaseURLOfARedisPortFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	start := time.Now()
	db, err := persistence.Open(context.Background(), "postgres://postgres@"+srv.Addr()+"/x")
	took := time.Since(start)
	if err == nil {
		db.Close()
		t.Fatal("a Redis port opened as a database")
	}
	if !strings.Contains(err.Error(), "not a PostgreSQL server") || !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("after %v: %v, want an error saying it is not PostgreSQL", took, err)
	}
	if took > 3*time.Second {
		t.Fatalf("the error came after %v, want at once (the probe waits 1.3 s at most)", took)
	}
}
