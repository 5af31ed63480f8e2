// Package testenv gives tests real stores of their own: a private
// redis-server on a random port and a freshly created Postgres database
// with a random name, both removed when the test ends. Tests never touch a
// shared Redis's data or another test's database.
//
// Postgres is reached through TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), which must
// allow CREATE DATABASE; redis-server must be on PATH. `make test` makes
// sure of both on a fresh machine.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver for the admin connection
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/internal/lease"
	"flashsale/persistence"
)

// RedisServer is a private redis-server process.
type RedisServer struct {
	tb      testing.TB
	Port    int
	dir     string
	durable bool
	// conf, if set, is a configuration file given before the flags;
	// extra are flags after them (a replica's, a sentinel's: replicated.go).
	conf  string
	extra []string

	mu   sync.Mutex
	stop func() // kills the running server and waits for it; nil when none runs
	proc *os.Process
}

// Addr is host:port of the server.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a new client of the server, closed at the test's end.
func (s *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// MustRedis starts a private redis-server (no persistence) on a free port
// and stops it when the test ends.
func MustRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	return mustRedis(tb, false)
}

// MustDurableRedis starts a private redis-server that writes every command
// to its append-only file before answering (appendfsync always), as a
// production Redis should: Kill and Restart then lose nothing.
func MustDurableRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	return mustRedis(tb, true)
}

func mustRedis(tb testing.TB, durable bool) *RedisServer {
	tb.Helper()
	s, err := StartRedis(tb.TempDir(), durable)
	if err != nil {
		tb.Fatal(err)
	}
	s.tb = tb
	tb.Cleanup(s.Kill)
	return s
}

// StartRedis starts a private redis-server on a free loopback port that
// keeps its files in dir, for programs that are not tests (the fault
// suite); the caller kills it. A durable server writes every command to its
// append-only file before answering.
func StartRedis(dir string, durable bool) (*RedisServer, error) {
	if _, err := exec.LookPath(RedisServerBin()); err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (run `make test`, which installs it): %w", err)
	}
	s := &RedisServer{dir: dir, durable: durable}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if s.Port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("start redis-server: %w", err)
}

// RedisServerBin is the redis-server the tests start: TEST_REDIS_SERVER
// (a path, to test against another version) or redis-server on PATH.
func RedisServerBin() string {
	if bin := os.Getenv("TEST_REDIS_SERVER"); bin != "" {
		return bin
	}
	return "redis-server"
}

func (s *RedisServer) start() error {
	aof := []string{"--appendonly", "no"}
	if s.durable {
		aof = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	// DEBUG from this machine only: RollBackInPlace reloads a snapshot
	// within the running process.
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--dir", s.dir, "--loglevel", "warning", "--enable-debug-command", "local"}, aof...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	args = append(args, s.extra...)
	cmd := exec.Command(RedisServerBin(), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() { _ = cmd.Process.Kill(); <-exited }
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-exited: // the port was taken, most likely
			return fmt.Errorf("redis-server on port %d exited at start", s.Port)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			// Another process's server on this port (it took the port
			// between freePort and our bind, or after a kill) must never
			// pass for ours.
			if !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				stop()
				return fmt.Errorf("port %d answered by another redis-server", s.Port)
			}
			s.mu.Lock()
			s.stop, s.proc = stop, cmd.Process
			s.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("redis-server on port %d not ready: %w", s.Port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL); its data is lost.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Pause stops the server's process with SIGSTOP: its sockets stay open
// and nothing answers, as with a Redis that hangs. Continue resumes it.
// A test that ends while the server is paused resumes it first, so that
// whatever the test started shuts down against a live server.
func (s *RedisServer) Pause() {
	s.signal(syscall.SIGSTOP)
	s.tb.Cleanup(func() {
		s.mu.Lock()
		p, running := s.proc, s.stop != nil
		s.mu.Unlock()
		if running {
			_ = p.Signal(syscall.SIGCONT) // a no-op when it runs already
		}
	})
}

// Continue resumes a paused server (SIGCONT).
func (s *RedisServer) Continue() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	p := s.proc
	running := s.stop != nil
	s.mu.Unlock()
	if !running {
		s.tb.Fatal("redis-server is not running")
	}
	if err := p.Signal(sig); err != nil {
		s.tb.Fatal(err)
	}
}

// Restart kills the server (SIGKILL) and starts it again on the same port:
// empty, as a Redis without persistence comes back, or with everything it
// acknowledged, for a durable one.
func (s *RedisServer) Restart() {
	s.tb.Helper()
	s.Kill()
	if err := s.Start(); err != nil {
		s.tb.Fatal(err)
	}
}

// Start starts a killed server again on its port, with whatever its files
// hold. The port is free after the kill, but anything on the machine may
// take it before the new server binds, so it tries for a while.
func (s *RedisServer) Start() error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart redis-server: %w", err)
}

// Wipe deletes a killed server's files, so that Start brings it back empty
// even when it is durable: Redis losing its data (a failover to an empty
// replica, a lost disk) rather than a crash.
func (s *RedisServer) Wipe() error {
	s.mu.Lock()
	running := s.stop != nil
	s.mu.Unlock()
	if running {
		return errors.New("wipe a running redis-server: kill it first")
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("wipe redis files: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return fmt.Errorf("wipe redis files: %w", err)
		}
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// AdminURL is the Postgres URL tests create their databases through.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// MustPostgresURL creates an empty database with a random name and returns
// its URL; the database is dropped when the test ends.
func MustPostgresURL(tb testing.TB) string {
	tb.Helper()
	u, drop, err := CreatePostgres(context.Background(), "flashsale_test_")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = drop() })
	return u
}

// CreatePostgres creates an empty database named prefix plus random hex
// through AdminURL and returns its URL and a func that drops it (with
// FORCE: nodes a caller killed may leave sessions behind).
func CreatePostgres(ctx context.Context, prefix string) (dbURL string, drop func() error, err error) {
	u, err := url.Parse(AdminURL())
	if err != nil {
		return "", nil, fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
	}
	admin, err := sql.Open("pgx", AdminURL())
	if err != nil {
		return "", nil, fmt.Errorf("open postgres admin connection: %w", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	name := prefix + randomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create test database (is Postgres reachable at TEST_DATABASE_URL? `make test` starts one): %w", err)
	}
	drop = func() error {
		admin, err := sql.Open("pgx", AdminURL())
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// PoolSize bounds each Postgres pool a test opens (MustOpen): the
// packages' tests run side by side against one server, whose default
// max_connections is 100. The service processes the tests start keep the
// node's default (DATABASE_MAX_CONNS 32, a quarter idle): with 8 a
// cluster member's reloads waited on each other for connections and its
// grabs answered UNAVAILABLE for minutes.
const PoolSize = 16

// MustPostgres creates a migrated database of the test's own and returns a
// Bun handle on it, closed when the test ends.
func MustPostgres(tb testing.TB) *bun.DB {
	tb.Helper()
	return MustOpen(tb, MustPostgresURL(tb))
}

// MustOpen opens and migrates the database at dbURL (Postgres URL or
// SQLite path) and closes it when the test ends.
func MustOpen(tb testing.TB, dbURL string) *bun.DB {
	tb.Helper()
	ctx := context.Background()
	db, err := persistence.Open(ctx, dbURL)
	if err != nil {
		tb.Fatalf("open %s: %v", dbURL, err)
	}
	persistence.SizePool(db, PoolSize)
	tb.Cleanup(func() { _ = db.Close() })
	if err := persistence.Migrate(ctx, db); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return db
}

// MustOrderIDs starts an order-id allocator on db (it leases a node slot,
// renewed under lease.KeepSlot) and releases it when the test ends.
func MustOrderIDs(tb testing.TB, db *bun.DB) *persistence.OrderIDs {
	tb.Helper()
	log := QuietLogger()
	ids := persistence.NewOrderIDs(db, log, persistence.OrderIDOptions{})
	if err := ids.Acquire(context.Background()); err != nil {
		tb.Fatalf("start the order-id allocator: %v", err)
	}
	keeper := lease.KeepSlot("order-id slot", ids, log)
	if err := keeper.Start(context.Background()); err != nil {
		tb.Fatalf("keep the order-id slot: %v", err)
	}
	tb.Cleanup(keeper.Stop)
	return ids
}

// StartWriter spawns the persistence actor of fam in an actor system of
// its own and stops both when the test ends. It takes no lease on the
// consumer name (Writer.Acquire).
func StartWriter(tb testing.TB, fam writer.Family, opts writer.Options) *writer.Writer {
	tb.Helper()
	log := QuietLogger()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	w := writer.New(fam, system, log, opts)
	if err := w.Start(context.Background()); err != nil {
		tb.Fatalf("start the writer: %v", err)
	}
	tb.Cleanup(func() {
		w.Stop()
		system.Shutdown()
	})
	return w
}

// OrderLogFamily is the persistence actor's family of the order logs over
// db and rdb, built as the node builds it.
func OrderLogFamily(db *bun.DB, rdb redis.UniversalClient, opts writer.Options) writer.Family {
	return writer.Orders(persistence.NewOrderLogs(rdb),
		persistence.NewOrderLogHandler(db, rdb, QuietLogger(), persistence.BatchOptions(opts.StoreOptions())),
		persistence.NewWriterLeases(db, persistence.OrdersFamily))
}

// RedPacketLogFamily is the persistence actor's family of the red-packet
// logs over db and rdb, built as the node builds it.
func RedPacketLogFamily(db *bun.DB, rdb redis.UniversalClient, opts writer.Options) writer.Family {
	return writer.RedPackets(persistence.NewRedPacketLogs(rdb),
		persistence.NewRedPacketLogHandler(db, rdb, QuietLogger(), persistence.BatchOptions(opts.StoreOptions())))
}

// StartOrderWriter runs the order log's persistence actor until the test
// ends.
func StartOrderWriter(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, opts writer.Options) *writer.Writer {
	tb.Helper()
	return StartWriter(tb, OrderLogFamily(db, rdb, opts), opts)
}

// StartRedPacketWriter runs the red-packet logs' persistence actor until
// the test ends.
func StartRedPacketWriter(tb testing.TB, db *bun.DB, rdb redis.UniversalClient, opts writer.Options) *writer.Writer {
	tb.Helper()
	return StartWriter(tb, RedPacketLogFamily(db, rdb, opts), opts)
}

// QuietLogger drops every record: for the services a test builds, whose
// logs would bury the test's own output (the test checks what they do,
// not what they say).
func QuietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
