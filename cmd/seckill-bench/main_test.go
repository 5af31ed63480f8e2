package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// -h prints the usage, without the secrets and URLs the environment
// holds, and exits 0, as does serve -h; a violated promise exits 1, any
// other failure 2.
func TestHelpExitsZeroWithoutSecrets(t *testing.T) {
	t.Setenv("JWT_SECRET", "bench-secret-sentinel")
	t.Setenv("DATABASE_URL", "postgres://u:pg-pass-sentinel@h/d")
	t.Setenv("REDIS_URL", "redis://:redis-pass-sentinel@h:6379/0")
	var usage strings.Builder
	_, err := parse([]string{"-h"}, &usage)
	if !errors.Is(err, flag.ErrHelp) || exitCode(err) != 0 {
		t.Fatalf("-h: %v, exit %d", err, exitCode(err))
	}
	if err := serve(t.Context(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v", err)
	}
	for _, s := range []string{"bench-secret-sentinel", "pg-pass-sentinel", "redis-pass-sentinel"} {
		if strings.Contains(usage.String(), s) {
			t.Errorf("the usage shows %q:\n%s", s, usage.String())
		}
	}
	if !strings.Contains(usage.String(), "-jwt-secret") {
		t.Errorf("no usage printed: %q", usage.String())
	}
	o, err := parse(nil, &usage)
	if err != nil || o.secret != "bench-secret-sentinel" || !strings.Contains(o.databaseURL, "pg-pass-sentinel") {
		t.Fatalf("the environment is not the default: %+v %v", o, err)
	}
	for err, want := range map[error]int{nil: 0, fmt.Errorf("%w: service sold-out", errViolations): 1, errors.New("target down"): 2} {
		if got := exitCode(err); got != want {
			t.Errorf("exit code of %v: %d, want %d", err, got, want)
		}
	}
}
