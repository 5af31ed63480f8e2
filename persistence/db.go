// Package persistence is the only package that speaks SQL (Postgres, or
// SQLite in the embedded mode, through Bun) and the only one that knows the
// Redis key layout and scripts.
package persistence

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/migrate"
	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" database/sql driver
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey is the Postgres advisory lock that serialises migrations
// when several nodes start at once ("flashsale" in ASCII, truncated).
const migrationLockKey = 0x666c61736873616c

// Open connects to the database named by databaseURL: a postgres:// or
// postgresql:// URL, or a path (or file: URL) of an SQLite database for the
// embedded mode. It pings before returning so that a wrong URL fails at start.
func Open(ctx context.Context, databaseURL string) (*bun.DB, error) {
	var db *bun.DB
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		if _, err := url.Parse(databaseURL); err != nil {
			return nil, fmt.Errorf("parse postgres url: %w", err)
		}
		sqldb, err := sql.Open("pgx", databaseURL)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		sqldb.SetMaxOpenConns(32)
		sqldb.SetMaxIdleConns(16)
		sqldb.SetConnMaxIdleTime(5 * time.Minute)
		db = bun.NewDB(sqldb, pgdialect.New())
	default:
		sqldb, err := sql.Open("sqlite", sqliteDSN(databaseURL))
		if err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		// SQLite allows one writer; a single connection turns lock contention
		// into queueing instead of SQLITE_BUSY errors.
		sqldb.SetMaxOpenConns(1)
		db = bun.NewDB(sqldb, sqlitedialect.New())
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return db, nil
}

func sqliteDSN(path string) string {
	if path == "" {
		path = "flashsale.db"
	}
	path = strings.TrimPrefix(path, "sqlite://")
	if !strings.HasPrefix(path, "file:") {
		path = "file:" + path
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)"
}

// IsPostgres reports whether db (a database, a connection or a
// transaction) talks to Postgres (rather than SQLite).
func IsPostgres(db bun.IDB) bool { return db.Dialect().Name() == dialect.PG }

// Migrate creates and upgrades the schema. It is idempotent and safe to run
// from several nodes at once: on Postgres a session advisory lock makes the
// nodes take turns, and every statement is IF NOT EXISTS.
func Migrate(ctx context.Context, db *bun.DB) error {
	if IsPostgres(db) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("migrate: take connection: %w", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", int64(migrationLockKey)); err != nil {
			return fmt.Errorf("migrate: take advisory lock: %w", err)
		}
		defer func() {
			// A fresh context: the unlock must happen even if ctx is done;
			// closing the connection would release the lock as well.
			unlockCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = conn.ExecContext(unlockCtx, "SELECT pg_advisory_unlock(?)", int64(migrationLockKey))
		}()
	}
	migrations := migrate.NewMigrations()
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := migrations.Discover(sub); err != nil {
		return fmt.Errorf("migrate: discover: %w", err)
	}
	m := migrate.NewMigrator(db, migrations, migrate.WithMarkAppliedOnSuccess(true))
	if err := m.Init(ctx); err != nil {
		return fmt.Errorf("migrate: init: %w", err)
	}
	if _, err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// sqlState returns the Postgres SQLSTATE of err, or "" (SQLite errors have
// none; callers match their text instead).
func sqlState(err error) string {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return coded.SQLState()
	}
	return ""
}

// isUniqueViolation reports a primary-key or unique-index conflict in either
// dialect.
func isUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	if state := sqlState(err); state != "" {
		return state == "23505"
	}
	return strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// isConstraintViolation reports an integrity-constraint error (SQLSTATE
// class 23 in Postgres, "constraint failed" in SQLite): retrying the same
// rows can never succeed.
func isConstraintViolation(err error) bool {
	if err == nil {
		return false
	}
	if state := sqlState(err); state != "" {
		return strings.HasPrefix(state, "23")
	}
	return strings.Contains(err.Error(), "constraint failed")
}
