package node_test

import (
	"database/sql"
	"errors"
	"net"
	"testing"

	"flashsale/config"
	"flashsale/config/owners"
	"flashsale/node"
	"flashsale/testkit/testenv"
)

// A node whose HTTP_ADDR is taken fails before it touches anything: the
// bind is its first step, so an empty database stays empty (no migration,
// no order-id node leased) and the error names the setting.
func TestANodeOnABusyPortFailsBeforeWritingAnything(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dbURL := testenv.MustPostgresURL(t)
	env := map[string]string{"HTTP_ADDR": busy.Addr().String(), "DATABASE_URL": dbURL, "REDIS_URL": testenv.MustRedis(t).URL(), "JWT_SECRET": "bind-test-secret-of-at-least-32-bytes"}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, nil, owners.Table())
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(t.Context(), cfg, testenv.QuietLogger())
	var ce *config.Error
	if err == nil {
		n.Stop()
		t.Fatal("a node started on a busy port")
	} else if !errors.As(err, &ce) || ce.Var != "HTTP_ADDR" {
		t.Fatalf("start on a busy port: %v, want an error naming HTTP_ADDR", err)
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables > 0 {
		t.Fatalf("the failed start created %d tables: it wrote to the database before binding", tables)
	}
}
