// Package frontend_test runs the client side of a frontend's first day
// against the service as a real process: graphql-http's conformance
// audit, CORS and the other answers a browser app meets, the same story through Apollo Client 4, Apollo Client 3.14 and
// urql (the npm clients pinned in package-lock.json beside this file), and
// a page in headless Chromium served from an allowed origin and from one
// that is not.
package frontend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

const secret = "frontend-test-secret-0123456789abcdef" // 32 bytes or more: the service refuses shorter HS256 keys

// TestFrontendClientsWorkAgainstTheService runs each Node script of this folder as a subtest
// against one service and one seckill voucher, each story as users of its
// own. Where node, npm or chromium is missing it skips, saying which,
// unless FLASHSALE_FRONTEND=1 (the test command sets it, after
// scripts/frontend-deps.sh has installed them): then a missing tool
// fails.
func TestFrontendClientsWorkAgainstTheService(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service as a process")
	}
	node := mustNodeModules(t)

	// The checks first pass against a stand-in that does what they ask
	// (reference/server.mjs): a check that fails there is wrong, not the
	// service.
	t.Run("every check passes against the stand-in", func(t *testing.T) {
		if _, err := exec.LookPath("chromium"); err != nil {
			missing(t, "chromium not installed (scripts/frontend-deps.sh installs it with apt-get)")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, node, "reference/selftest.mjs").CombinedOutput()
		t.Logf("reference/selftest.mjs:\n%s", out)
		if err != nil {
			t.Fatalf("the checks fail against the stand-in: %v", err)
		}
	})

	allowedPort, deniedPort := pagePort(t), pagePort(t)
	rs := testenv.MustRedis(t)
	bin, err := testenv.BuildService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := testenv.StartService(t.Context(), bin, map[string]string{
		"REDIS_URL": rs.URL(), "DATABASE_URL": testenv.MustPostgresURL(t), "JWT_SECRET": secret, "LOG_LEVEL": "warn",
		"CORS_ALLOWED_ORIGINS": "http://127.0.0.1:" + strconv.Itoa(allowedPort),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Kill)

	tokens := auth.NewTokens(secret)
	issue := func(user int64, role auth.Role, ttl time.Duration) string {
		tok, err := tokens.Issue(auth.Identity{UserID: user, Role: role}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	voucherID := createVoucher(t, svc.Base, issue(1, auth.RoleAdmin, time.Hour))
	// Past the verifier's few seconds of leeway.
	expired := issue(999, auth.RoleUser, -time.Minute)
	api := svc.Base + "/query"

	run := func(t *testing.T, script string, env ...string) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, script)
		cmd.Env = append(os.Environ(), append([]string{"API_URL=" + api, "VOUCHER_ID=" + voucherID}, env...)...)
		out, err := cmd.CombinedOutput()
		t.Logf("%s:\n%s", script, out)
		if err != nil {
			t.Fatalf("%s: %v (its failed steps are listed above)", script, err)
		}
	}

	t.Run("graphql-http's audit finds no MUST or SHOULD failure", func(t *testing.T) {
		run(t, "audit.mjs", "TOKEN="+issue(10, auth.RoleUser, time.Hour))
	})
	t.Run("CORS, websocket origin, status codes and Retry-After are what a browser app needs", func(t *testing.T) {
		run(t, "protocol.mjs", "TOKEN="+issue(20, auth.RoleUser, time.Hour),
			"ALLOWED_ORIGIN=http://127.0.0.1:"+strconv.Itoa(allowedPort))
	})
	for i, story := range []struct{ client, script string }{
		{"Apollo Client 4", "story-apollo4.mjs"},
		{"Apollo Client 3.14", "story-apollo3.mjs"},
		{"urql", "story-urql.mjs"},
	} {
		user := int64(100 * (i + 1))
		t.Run(story.client+" runs the story with a normalized cache and no type policies", func(t *testing.T) {
			run(t, story.script,
				"TOKEN="+issue(user, auth.RoleUser, time.Hour),
				"GRAB_TOKEN="+issue(user+1, auth.RoleUser, time.Hour),
				"EXPIRED_TOKEN="+expired)
		})
	}
	t.Run("a page in headless Chromium works from the allowed origin and is refused from another", func(t *testing.T) {
		browser, err := exec.LookPath("chromium")
		if err != nil {
			missing(t, "chromium not installed (scripts/frontend-deps.sh installs it with apt-get)")
		}
		run(t, "browser.mjs",
			"TOKEN="+issue(900, auth.RoleUser, time.Hour),
			"DENIED_TOKEN="+issue(901, auth.RoleUser, time.Hour),
			"ALLOWED_PORT="+strconv.Itoa(allowedPort),
			"DENIED_PORT="+strconv.Itoa(deniedPort),
			"CHROMIUM="+browser)
	})
}

// mustNodeModules returns node's path once the pinned clients are
// installed (npm ci where node_modules is missing), skipping where node or
// npm is missing.
func mustNodeModules(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node not installed: these checks run npm clients (Node 20 or later; scripts/frontend-deps.sh)")
	}
	if out, err := exec.Command(node, "-p", `process.versions.node.split(".")[0]`).Output(); err != nil {
		missing(t, fmt.Sprintf("node does not run: %v", err))
	} else if major, _ := strconv.Atoi(strings.TrimSpace(string(out))); major < 20 {
		missing(t, fmt.Sprintf("node %s is too old: the npm clients need Node 20 or later (Debian 12 ships 18)", strings.TrimSpace(string(out))))
	}
	if _, err := os.Stat("node_modules/.package-lock.json"); err == nil {
		return node
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing(t, "npm not installed: cannot install the pinned clients (scripts/frontend-deps.sh)")
	}
	cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	if out, err := cmd.CombinedOutput(); err != nil {
		missing(t, fmt.Sprintf("npm ci (the pinned clients) failed: %v\n%s", err, out))
	}
	return node
}

// missing ends the test for a tool that is not installed: a skip, or a
// failure under FLASHSALE_FRONTEND=1, where the test command has
// installed every tool and a missing one is a broken set-up.
func missing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("FLASHSALE_FRONTEND") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// pagePort is a loopback port free when asked, for a page's origin,
// which must be known before the service starts (to be named in
// CORS_ALLOWED_ORIGINS) but is bound only when browser.mjs runs. It is
// below the ephemeral range, so that no connection made meanwhile (and
// there are many) takes it as its local port.
func pagePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}

// createVoucher creates a running seckill voucher with stock enough for
// every story and returns its id.
func createVoucher(t *testing.T, base, admin string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"query": `mutation { createVoucher(input: {shopId: "1", title: "First day", payValue: 100, actualValue: 1000, type: SECKILL, stock: 1000, beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z"}) { id } }`})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/query", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			CreateVoucher struct{ ID string } `json:"createVoucher"`
		} `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Data.CreateVoucher.ID == "" {
		t.Fatalf("createVoucher: HTTP %d, %v, errors %s", resp.StatusCode, err, fmt.Sprint(out.Errors))
	}
	return out.Data.CreateVoucher.ID
}
