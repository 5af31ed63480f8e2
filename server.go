// Command flashsale is the flash-sale voucher service: GraphQL over HTTP and
// websockets, stock in Redis, orders in Postgres (or, with no configuration,
// an in-process Redis and an SQLite file).
//
//	go run .                                   # embedded mode
//	go run . token --user 42 --role admin      # print a token for JWT_SECRET
//	go run . solve CHALLENGE [difficulty]      # a nonce for a seckillChallenge
//	go run . --version                         # module version and VCS revision
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
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"flashsale/config"
	"flashsale/config/owners"
	"flashsale/node"
)

//go:generate go tool gqlgen generate

func main() {
	// Once per process, before any client exists: go-redis reads its logger
	// without synchronisation, so it must not be swapped while clients run.
	redis.SetLogger(redisLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) { // usage was asked for and printed
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flashsale:", err)
		os.Exit(1)
	}
}

// run is the whole program; main only turns its error into an exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "token" {
		return runToken(args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "solve" {
		return runSolve(args[1:], stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		_, err := fmt.Fprintln(stdout, version())
		return err
	}
	table := owners.Table()
	cfg, err := config.Load(args, getenv, stderr, table)
	if err != nil {
		return err
	}
	log := node.NewLogger(cfg, stderr)
	slog.SetDefault(log) // libraries that log through slog's default (go-redis, via redisLogger) use ours
	// One record per setting rather than one of ~2,000 characters: an
	// operator greps for the setting (name=grab_timeout), a log shipper
	// keeps each whole. Each setting left unset shows its package's
	// default, which that package applies.
	settings := cfg.Effective(table).LogValue().Group()
	log.Info("starting", "version", version(), "settings", len(settings))
	for _, s := range settings {
		log.Info("setting", "name", s.Key, "value", s.Value)
	}
	return node.Serve(ctx, cfg, log, stdout)
}

// redisLogger routes go-redis's internal logger, which otherwise writes to
// stderr, to slog's default logger (ours, once run has set it) at debug
// level. What it reports (each failed dial of the pool, retried) reaches us
// anyway as the error of the call that failed, and an unreachable REDIS_URL
// must stop the service with one line, not five.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}

// linkedRevision is the VCS revision stamped at link time (`make build`:
// -ldflags "-X main.linkedRevision=REV", with "+dirty" for a tree with
// local changes), for builds the toolchain does not stamp itself: go run,
// GOFLAGS=-buildvcs=false, and a git worktree, whose .git is a file the
// toolchain does not recognise.
var linkedRevision string

// version describes this build.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "flashsale (no build information)"
	}
	return describeBuild(info, linkedRevision)
}

// describeBuild says which code a binary runs, from what the Go toolchain
// stamped in it: the module version (a tag or a pseudo-version from the
// VCS, "(devel)" when the build had no VCS information), the VCS revision,
// its time and whether the tree had local changes ("modified"), else the
// revision linked in (linked), else why there is none.
func describeBuild(info *debug.BuildInfo, linked string) string {
	v := "flashsale " + info.Main.Version
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	switch rev := settings["vcs.revision"]; {
	case rev != "":
		v += " revision " + rev
		if t := settings["vcs.time"]; t != "" {
			v += " " + t
		}
		if settings["vcs.modified"] == "true" {
			v += " (modified)"
		}
	case strings.TrimSuffix(linked, "+dirty") != "":
		rev, dirty := strings.CutSuffix(linked, "+dirty")
		v += " revision " + rev
		if dirty {
			v += " (modified)"
		}
	default:
		v += " (no VCS revision: go run, -buildvcs=false and git worktrees build without one; `make build` stamps it)"
	}
	return v + " " + info.GoVersion
}
