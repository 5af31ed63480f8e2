// Command flashsale is the flash-sale voucher service: GraphQL over HTTP and
// websockets, stock in Redis, orders in Postgres (or, with no configuration,
// an in-process Redis and an SQLite file).
//
//	go run .                                   # embedded mode
//	go run . token --user 42 --role admin      # print a token for JWT_SECRET
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"flashsale/internal/config"
)

//go:generate go tool gqlgen generate

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "flashsale:", err)
		}
		os.Exit(1)
	}
}

// run is the whole program; main only turns its error into an exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "token" {
		return runToken(args[1:], getenv, stdout, stderr)
	}
	cfg, err := config.Load(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	log.Info("starting", "config", cfg)
	app, err := start(ctx, cfg, log)
	if err != nil {
		return err
	}
	if cfg.Demo {
		if err := app.printDemo(ctx, stdout); err != nil {
			app.stop()
			return err
		}
	}
	return app.serve(ctx)
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	level, _ := cfg.Level()
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
