package persistence_test

import (
	"database/sql"
	"sync"
	"testing"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// A node never holds more Postgres connections than DATABASE_MAX_CONNS,
// however many of its goroutines query at once, and keeps a quarter of
// them open while idle: the server's max_connections is shared by every
// node (and, in the test suite, by every package's tests).
func TestAPoolNeverOpensMoreThanItsSize(t *testing.T) {
	t.Parallel()
	db := testenv.MustPostgres(t)
	const size = 4
	persistence.SizePool(db, size)
	ctx := t.Context()
	var name string
	if err := db.QueryRowContext(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*size)
	for range 3 * size {
		wg.Go(func() {
			if _, err := db.ExecContext(ctx, "SELECT pg_sleep(0.2)"); err != nil {
				errs <- err
			}
		})
	}
	// Count the database's client sessions while the queries wait on each
	// other, from a connection of another pool. An autovacuum worker shows
	// the database's name too (a fresh machine's CI saw one: 5 sessions).
	admin, err := sql.Open("pgx", testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	most := 0
	for range 10 {
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		most = max(most, n)
		if err := admin.QueryRowContext(ctx, "SELECT 1 FROM pg_sleep(0.05)").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most > size {
		t.Fatalf("%d sessions on the database at once, want at most %d", most, size)
	}
	if most < 2 {
		t.Fatalf("at most %d session seen while %d queries waited: the count did not see the pool", most, 3*size)
	}
	if st := db.Stats(); st.Idle > max(2, size/4) || st.Idle < 1 {
		t.Fatalf("%d idle connections after the queries, want 1 to %d (max(2, %d/4) kept)", st.Idle, max(2, size/4), size)
	}
}
