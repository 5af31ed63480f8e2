package persistence_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/uptrace/bun"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// migrateURLEnv makes the test binary a plain "migrate this database"
// process, so that the concurrency test runs real separate processes.
const migrateURLEnv = "FLASHSALE_TEST_MIGRATE_URL"

func TestMain(m *testing.M) {
	if url := os.Getenv(migrateURLEnv); url != "" {
		ctx := context.Background()
		db, err := persistence.Open(ctx, url)
		if err == nil {
			err = persistence.Migrate(ctx, db)
			_ = db.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var contractTables = []string{"tb_voucher", "tb_seckill_voucher", "tb_voucher_order", "tb_red_packet", "tb_red_packet_grab", "tb_stock_ledger"}

func assertSchema(tb testing.TB, db *bun.DB) {
	tb.Helper()
	for _, table := range contractTables {
		var n int
		if err := db.NewSelect().Table(table).ColumnExpr("count(*)").Scan(context.Background(), &n); err != nil {
			tb.Errorf("table %s: %v", table, err)
		}
	}
	var applied int
	if err := db.NewSelect().Table("bun_migrations").ColumnExpr("count(*)").Scan(context.Background(), &applied); err != nil {
		tb.Fatalf("bun_migrations: %v", err)
	}
	entries, _ := filepath.Glob("migrations/*.up.sql")
	if applied != len(entries) {
		tb.Fatalf("%d migrations recorded, want %d (each exactly once)", applied, len(entries))
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"postgres", testenv.MustPostgresURL},
		{"sqlite", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "flashsale.db") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testenv.MustOpen(t, tc.url(t)) // first run
			if err := persistence.Migrate(t.Context(), db); err != nil {
				t.Fatalf("second run: %v", err)
			}
			assertSchema(t, db)
		})
	}
}

func TestMigrateConcurrentlyFromSeveralProcesses(t *testing.T) {
	t.Parallel()
	url := testenv.MustPostgresURL(t)
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	outs := make([][]byte, procs)
	errc := make(chan error, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), migrateURLEnv+"="+url)
	}
	for i, cmd := range cmds {
		go func() {
			out, err := cmd.CombinedOutput()
			outs[i] = out
			errc <- err
		}()
	}
	for range cmds {
		if err := <-errc; err != nil {
			t.Errorf("migrate process failed: %v", err)
		}
	}
	if t.Failed() {
		for i, out := range outs {
			t.Logf("process %d: %s", i, out)
		}
		t.FailNow()
	}
	db := testenv.MustOpen(t, url)
	assertSchema(t, db)
}

// TestOrderTablesCheckNoForeignKeyPerRow: on Postgres the tables the order
// writer fills per order carry no foreign key (migration 20261123000001,
// docs/DECISIONS.md "No foreign keys on the order tables"); the voucher's
// seckill row keeps its own, and the writer refuses an order of an
// unknown voucher itself (TestOrderWriterDeadLettersImpossibleOrders).
func TestOrderTablesCheckNoForeignKeyPerRow(t *testing.T) {
	t.Parallel()
	db := testenv.MustPostgres(t)
	var tables []string
	err := db.NewSelect().TableExpr("pg_constraint").ColumnExpr("conrelid::regclass::text").
		Where("contype = 'f'").Order("conname").Scan(t.Context(), &tables)
	if err != nil {
		t.Fatal(err)
	}
	for _, per := range []string{"tb_voucher_order", "tb_voucher_user", "tb_stock_ledger"} {
		if slices.Contains(tables, per) {
			t.Errorf("%s has a foreign key: Postgres checks it on every order", per)
		}
	}
	if !slices.Contains(tables, "tb_seckill_voucher") {
		t.Errorf("tb_seckill_voucher lost its foreign key to tb_voucher (tables with keys: %v)", tables)
	}
}

// Bun writes every value into a query's text, so each text is new: the
// service's connections must send them as plain queries, not prepare and
// keep each one (pgx's default kept up to 512 per connection, with their
// text, on both sides).
func TestPostgresConnectionsPrepareNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testenv.MustOpen(t, testenv.MustPostgresURL(t))
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 20 {
		var n int
		if err := conn.NewSelect().ColumnExpr("?::int + 1", i).Scan(ctx, &n); err != nil || n != i+1 {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
	}
	var prepared int
	if err := conn.NewSelect().TableExpr("pg_prepared_statements").ColumnExpr("count(*)").Scan(ctx, &prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("the connection holds %d prepared statements after 20 queries", prepared)
	}
}
