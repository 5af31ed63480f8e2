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
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
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
	return describeBuild(info, linkedRevision, checkoutRevision)
}

// describeBuild says which code a binary runs, from what the Go toolchain
// stamped in it: the module version (a tag or a pseudo-version from the
// VCS; "(devel)", left out, when the build had no VCS information), the
// VCS revision, its time and whether the tree had local changes
// ("modified"); else the revision linked in (linked); else the revision
// of the checkout the binary was built from, read when asked (checkout:
// go run); else why there is none.
func describeBuild(info *debug.BuildInfo, linked string, checkout func() (rev string, dirty, ok bool)) string {
	v := "flashsale"
	if info.Main.Version != "(devel)" && info.Main.Version != "" {
		v += " " + info.Main.Version
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	rev, dirty, ok := settings["vcs.revision"], settings["vcs.modified"] == "true", true
	var notes []string
	switch {
	case rev != "":
		if t := settings["vcs.time"]; t != "" {
			rev += " " + t
		}
	case strings.TrimSuffix(linked, "+dirty") != "":
		rev, dirty = strings.CutSuffix(linked, "+dirty")
	default:
		rev, dirty, ok = checkout()
		notes = append(notes, "read from its checkout at run time")
	}
	if !ok {
		return v + " (no VCS revision: built outside a git checkout, or with -buildvcs=false and -trimpath; `make build` stamps it) " + info.GoVersion
	}
	if dirty {
		notes = append([]string{"modified"}, notes...)
	}
	v += " revision " + rev
	if len(notes) > 0 {
		v += " (" + strings.Join(notes, "; ") + ")"
	}
	return v + " " + info.GoVersion
}

// checkoutRevision is the git revision of the checkout this binary was
// built from, and whether it had local changes: go run stamps none, nor
// does a build in a git worktree, whose .git is a file the toolchain does
// not recognise. The checkout is where this file was compiled from; ok is
// false for a -trimpath build, or where git or the checkout is gone.
func checkoutRevision() (rev string, dirty, ok bool) {
	_, file, _, found := runtime.Caller(0)
	if !found || !filepath.IsAbs(file) {
		return "", false, false
	}
	dir := filepath.Dir(file)
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false, false
	}
	status, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), err == nil && len(bytes.TrimSpace(status)) > 0, true
}
