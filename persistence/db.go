// Package persistence is the only package that speaks SQL (Postgres, or
// SQLite in the embedded mode, through Bun) and the only one that knows the
// Redis key layout and scripts.
package persistence

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/migrate"
	"modernc.org/sqlite" // also registers the pure-Go "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
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
	ping := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	}
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		if _, err := url.Parse(databaseURL); err != nil {
			return nil, fmt.Errorf("parse postgres url: %w", err)
		}
		cfg, err := pgx.ParseConfig(databaseURL) // its errors hide the password
		if err != nil {
			return nil, fmt.Errorf("parse postgres url: %w", err)
		}
		if !strings.Contains(databaseURL, "default_query_exec_mode=") {
			cfg.DefaultQueryExecMode = queryExecMode
		}
		sqldb := stdlib.OpenDB(*cfg)
		sqldb.SetConnMaxIdleTime(5 * time.Minute)
		db = bun.NewDB(sqldb, pgdialect.New())
		SizePool(db, MaxConnsDefault)
		ping = func(ctx context.Context) error { return pingPostgres(ctx, db, &cfg.Config) }
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
	if err := ping(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return db, nil
}

// MaxConnsDefault is how many connections a node opens to Postgres at
// most (DATABASE_MAX_CONNS).
const MaxConnsDefault = 32

// SizePool bounds a Postgres pool to n connections (0: MaxConnsDefault),
// a quarter of them (at least 2) kept open while idle. SQLite keeps its
// one connection.
func SizePool(db *bun.DB, n int) {
	n = cmp.Or(n, MaxConnsDefault)
	if !IsPostgres(db) || n < 1 {
		return
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(min(n, max(2, n/4)))
}

// queryExecMode is how pgx sends Bun's queries: as one simple-protocol
// query each. Bun writes every value into the query's text itself, so
// under pgx's default mode (prepare and cache each distinct text, 512 per
// connection) nearly every statement was prepared once, never reused, and
// kept: the order writer's batches alone held about 15 MB of query text
// in the service after 150,000 orders, and as many prepared statements in
// each Postgres backend (docs/DECISIONS.md, "Postgres driver").
const queryExecMode = pgx.QueryExecModeSimpleProtocol

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
	// The migration files are Go templates: a statement only one dialect
	// runs sits in {{if .Postgres}}.
	m := migrate.NewMigrator(db, migrations, migrate.WithMarkAppliedOnSuccess(true),
		migrate.WithTemplateData(struct{ Postgres bool }{IsPostgres(db)}))
	if err := m.Init(ctx); err != nil {
		return fmt.Errorf("migrate: init: %w", err)
	}
	if _, err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Postgres SQLSTATE codes of the violations told apart.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
)

// constraintViolation is an integrity-constraint error of either
// dialect, as its driver reports it.
type constraintViolation struct {
	unique     bool // a unique index or primary key
	foreignKey bool
	// constraint names what refused: the constraint's name in Postgres
	// (pgconn.PgError.ConstraintName, or table.column without one); in
	// SQLite, which reports no name apart from its message, what the
	// message names after "constraint failed: " (the columns, or the
	// CHECK's expression).
	constraint string
}

// violation recognises an integrity-constraint error by its code: SQLSTATE
// class 23 in Postgres, the SQLITE_CONSTRAINT result code (extended codes
// are on in modernc.org/sqlite) in SQLite. Retrying the same rows can
// never succeed.
func violation(err error) (constraintViolation, bool) {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		if !strings.HasPrefix(pg.Code, "23") {
			return constraintViolation{}, false
		}
		name := pg.ConstraintName
		if name == "" && pg.ColumnName != "" {
			name = pg.TableName + "." + pg.ColumnName
		}
		return constraintViolation{
			unique:     pg.Code == pgUniqueViolation,
			foreignKey: pg.Code == pgForeignKeyViolation,
			constraint: name,
		}, true
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		code := lite.Code()
		if code&0xff != sqlite3.SQLITE_CONSTRAINT {
			return constraintViolation{}, false
		}
		msg := lite.Error() // "constraint failed: CHECK constraint failed: stock >= 0 (275)"
		name := msg[strings.LastIndex(msg, "constraint failed: ")+len("constraint failed: "):]
		name = strings.TrimSuffix(name, " ("+strconv.Itoa(code)+")")
		return constraintViolation{
			unique:     code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY,
			foreignKey: code == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY,
			constraint: name,
		}, true
	}
	return constraintViolation{}, false
}

// isUniqueViolation reports a primary-key or unique-index conflict in either
// dialect.
func isUniqueViolation(err error) bool {
	v, ok := violation(err)
	return ok && v.unique
}

// isConstraintViolation reports an integrity-constraint error in either
// dialect.
func isConstraintViolation(err error) bool {
	_, ok := violation(err)
	return ok
}
