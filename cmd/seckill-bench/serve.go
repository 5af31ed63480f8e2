package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/bench/reference"
	"flashsale/bench/sale"
	"flashsale/internal/auth"
)

// serve runs a reference design until ctx ends:
//
//	seckill-bench serve reference|ceiling|ceiling-graphql --addr 127.0.0.1:9000 --jwt-secret s [--redis-url u --database-url u --prefix p]
func serve(ctx context.Context, args []string) error {
	const usage = "usage: seckill-bench serve reference|ceiling|ceiling-graphql --addr host:port ..."
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(os.Stderr, usage)
		return flag.ErrHelp
	}
	if len(args) == 0 || (args[0] != "reference" && args[0] != "ceiling" && args[0] != "ceiling-graphql") {
		return errors.New(usage)
	}
	kind := args[0]
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9000", "listen address")
	// No default from the environment: -h would print the secret.
	secret := fs.String("jwt-secret", "", "HS256 secret (default: JWT_SECRET)")
	redisURL := fs.String("redis-url", "", "reference: its Redis (default: REDIS_URL)")
	dbURL := fs.String("database-url", "", "reference: its Postgres database (default: DATABASE_URL)")
	prefix := fs.String("prefix", "ref:", "reference: prefix of its Redis keys")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	*secret = cmp.Or(*secret, os.Getenv("JWT_SECRET"))
	*redisURL = cmp.Or(*redisURL, os.Getenv("REDIS_URL"))
	*dbURL = cmp.Or(*dbURL, os.Getenv("DATABASE_URL"))
	if *secret == "" {
		return errors.New("serve: --jwt-secret is required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tokens := auth.NewTokens(*secret)
	var handler http.Handler
	done := make(chan struct{})
	switch kind {
	case "ceiling":
		handler = (&reference.Ceiling{Tokens: tokens}).Handler()
		close(done)
	case "ceiling-graphql":
		handler = (&reference.GraphQLCeiling{Tokens: tokens}).Handler()
		close(done)
	default:
		opt, err := redis.ParseURL(*redisURL)
		if err != nil {
			return fmt.Errorf("serve: --redis-url: %w", err)
		}
		// As many connections as requests in flight: the seeds' design
		// holds one per grab for its two round trips.
		opt.PoolSize = 256
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		db, err := sql.Open("pgx", *dbURL)
		if err != nil {
			return fmt.Errorf("serve: --database-url: %w", err)
		}
		defer db.Close()
		srv := reference.New(reference.Config{Redis: rdb, DB: db, Tokens: tokens, Prefix: *prefix, Log: log})
		if err := srv.Migrate(ctx); err != nil {
			return err
		}
		go func() { defer close(done); srv.Run(ctx) }()
		handler = srv.Handler()
	}
	hs := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-done
	return err
}

// startReference starts `serve kind` as a child process on a free
// loopback port and returns its endpoint and a func that stops it and
// removes what it made (its database, its Redis keys).
func startReference(ctx context.Context, kind string, o options, stderr io.Writer) (sale.Endpoint, func(), error) {
	port, err := freePort()
	if err != nil {
		return sale.Endpoint{}, nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve", kind, "--addr", addr, "--jwt-secret", o.secret}
	ep := sale.Endpoint{Name: kind, API: sale.Plain, URLs: []string{"http://" + addr}}
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	switch kind {
	case "ceiling":
		ep.NoStock = true
	case "ceiling-graphql":
		ep.API, ep.NoStock = sale.GraphQL, true
	default:
		if o.databaseURL == "" || o.redisURL == "" {
			return sale.Endpoint{}, nil, errors.New("the reference needs --database-url (a Postgres server where it may create a database) and --redis-url")
		}
		tag := randomHex(4)
		dbURL, drop, err := createDatabase(ctx, o.databaseURL, "seckill_reference_"+tag)
		if err != nil {
			return sale.Endpoint{}, nil, err
		}
		cleanups = append(cleanups, drop)
		prefix := "seckill-bench:" + tag + ":"
		cleanups = append(cleanups, func() { deleteKeys(o.redisURL, prefix) })
		args = append(args, "--redis-url", o.redisURL, "--database-url", dbURL, "--prefix", prefix)
		ep.DatabaseURL, ep.RedisURL = dbURL, o.redisURL
	}
	exe, err := os.Executable()
	if err != nil {
		cleanup()
		return sale.Endpoint{}, nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cleanup()
		return sale.Endpoint{}, nil, err
	}
	ep.PID = cmd.Process.Pid
	cleanups = append(cleanups, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	if err := waitHealthy(ctx, ep.URLs[0]+"/healthz", 10*time.Second); err != nil {
		cleanup()
		return sale.Endpoint{}, nil, fmt.Errorf("%s did not start: %w", kind, err)
	}
	return ep, cleanup, nil
}

func waitHealthy(ctx context.Context, u string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s: %v", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createDatabase creates database name on the server of serverURL and
// returns its URL and a func that drops it.
func createDatabase(ctx context.Context, serverURL, name string) (string, func(), error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("parse database URL: %w", err)
	}
	admin, err := sql.Open("pgx", serverURL)
	if err != nil {
		return "", nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create the reference's database: %w", err)
	}
	drop := func() {
		admin, err := sql.Open("pgx", serverURL)
		if err != nil {
			return
		}
		defer admin.Close()
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// deleteKeys removes the reference's keys from a shared Redis.
func deleteKeys(redisURL, prefix string) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
