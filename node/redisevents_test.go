package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// The watch says each change of the stock Redis once: an evicting policy
// switched on (WARN, naming it), off again (INFO), and another server
// after a restart (WARN); nothing while nothing changes.
func TestRedisChangesAreLoggedOnceEach(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	rdb := srv.Client()
	var buf bytes.Buffer
	w := newRedisWatch(rdb, slog.New(slog.NewTextHandler(&buf, nil)))
	ctx := t.Context()
	step := func(want bool, what string) {
		t.Helper()
		if got := w.step(ctx); got != want {
			t.Fatalf("%s: logged %v, want %v:\n%s", what, got, want, buf.String())
		}
	}
	step(false, "the first read")
	step(false, "nothing changed")
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	step(true, "an evicting policy")
	step(false, "the same policy again")
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	step(true, "noeviction again")
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the restarted server read", func() bool { return w.step(ctx) })
	step(false, "the same server again")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "allkeys-lru") ||
		!strings.Contains(lines[1], "level=INFO") || !strings.Contains(lines[2], "redis server changed") {
		t.Fatalf("lines:\n%s\nwant the policy's WARN, its INFO and the new server's WARN", buf.String())
	}
}

// On a Redis Cluster every primary has its own token: a stable cluster is
// no news, however many rounds are read (a watch that read one random
// node's token logged a "server changed" every second).
func TestAStableRedisClusterIsNoNews(t *testing.T) {
	t.Parallel()
	nodes := testenv.MustRedisCluster(t, 3)
	target, err := persistence.ParseRedisTarget(persistence.RedisCluster, testenv.ClusterURL(nodes...))
	if err != nil {
		t.Fatal(err)
	}
	rdb := target.Client(persistence.BackgroundTuning())
	t.Cleanup(func() { _ = rdb.Close() })
	var buf bytes.Buffer
	w := newRedisWatch(rdb, slog.New(slog.NewTextHandler(&buf, nil)))
	for i := range 6 {
		if w.step(t.Context()) {
			t.Fatalf("round %d logged on a stable cluster:\n%s", i, buf.String())
		}
	}
	w.mu.Lock()
	n := len(w.byNode)
	w.mu.Unlock()
	if n != 3 {
		t.Fatalf("the watch read %d primaries' tokens, want the 3", n)
	}
}
