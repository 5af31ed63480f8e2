package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"flashsale/config"
	"flashsale/internal/auth"
)

// A newcomer's tokens survive a restart of the embedded mode: its secret
// is kept beside the SQLite file, created once with mode 0600.
func TestEmbeddedTokensSurviveARestart(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "flashsale.db")
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": dbPath}

	base, admin, _, stop := startStoppableService(t, env)
	vouchers := postQuery(t, base, admin, `{ vouchers { edges { node { id } } } }`)
	demo := vouchers["vouchers"].(map[string]any)["edges"].([]any)[0].(map[string]any)["node"].(map[string]any)["id"].(string)
	grab := func(base, token string) string {
		t.Helper()
		out := postQuery(t, base, token, `mutation { seckillVoucher(voucherId: "`+demo+`") { code } }`)
		return out["seckillVoucher"].(map[string]any)["code"].(string)
	}
	if code := grab(base, admin); code != "OK" {
		t.Fatalf("first grab of the demo voucher: %s", code)
	}
	stop()
	waitClosed(t, base)

	fi, err := os.Stat(config.SecretPath(dbPath))
	if err != nil {
		t.Fatalf("no secret file beside the database: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, want 0600", fi.Mode().Perm())
	}

	base2, _ := startService(t, env)
	// The first start's token, against the second start.
	postQuery(t, base2, admin, `{ vouchers { edges { node { id } } } }`)

	// The restarted node sells at once (its in-process Redis died with
	// the first process, so no order writer elsewhere can hold orders of
	// the lost load, and it does not wait for one), and the buyer of the
	// first start is still at the limit.
	if code := grab(base2, mustToken(t, env, "--user", "7")); code != "OK" {
		t.Fatalf("a new buyer's grab right after the restart: %s, want OK", code)
	}
	if code := grab(base2, admin); code != "LIMIT_REACHED" {
		t.Fatalf("the first start's buyer after the restart: %s, want LIMIT_REACHED", code)
	}
}

// `flashsale token` in embedded mode signs with the service's own secret.
func TestTokenCommandSignsWithTheEmbeddedSecret(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "flashsale.db")
	base, _ := startService(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": dbPath})

	tok := mustToken(t, map[string]string{"SQLITE_PATH": dbPath}, "--user", "7", "--role", "admin")
	postQuery(t, base, tok, `{ vouchers { edges { node { id } } } }`)

	secret, err := os.ReadFile(config.SecretPath(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := auth.NewTokens(strings.TrimSpace(string(secret))).Verify(tok); err != nil || id.UserID != 7 {
		t.Fatalf("token does not verify with the file's secret: %+v %v", id, err)
	}
}

// mustToken is `flashsale token args...` of the built binary under env
// alone: the token it prints.
func mustToken(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	out, stderr, code := runBinaryOut(t, buildBinary(t), env, append([]string{"token"}, args...)...)
	if code != 0 {
		t.Fatalf("token %v: exit %d: %s", args, code, stderr)
	}
	return strings.TrimSpace(out)
}

// waitClosed waits until nothing answers at base (a stopped service).
func waitClosed(t *testing.T, base string) {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			return
		}
		_ = c.Close()
	}
	t.Fatalf("%s still answers after stop", base)
}

// The embedded playground opens with the sample operations and the demo
// admin token in its headers, a token the service accepts.
func TestEmbeddedPlaygroundOpensWithOperationsAndToken(t *testing.T) {
	t.Parallel()
	base, _ := startService(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": filepath.Join(t.TempDir(), "flashsale.db")})
	code, page := getStatus(t, base+"/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	for _, op := range []string{"mutation CreateVoucher", "mutation Grab", "mutation Pay", "subscription WatchStock"} {
		if !strings.Contains(page, op) {
			t.Errorf("playground page lacks %q", op)
		}
	}
	m := regexp.MustCompile(`data-headers="[^"]*Bearer ([A-Za-z0-9._-]+)`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no token in the playground's headers:\n%s", page)
	}
	postQuery(t, base, m[1], `{ vouchers { edges { node { id } } } }`)
}

// --version prints the build's version and revision (or why it has none)
// and exits 0; -h names every subcommand and types the flags; each
// subcommand answers -h with its usage and exit 0.
func TestVersionAndHelpNameTheSubcommands(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "flashsale ") || !strings.Contains(string(out), "go1.") ||
		!strings.Contains(string(out), " revision ") && !strings.Contains(string(out), "no VCS revision") {
		t.Fatalf("--version: %q (%v)", out, err)
	}
	stderr, code := runBinary(t, bin, nil, "-h")
	for _, want := range []string{"flashsale token --user", "flashsale solve CHALLENGE", "flashsale --version", "  -grab-timeout duration\n", "  -demo\n"} {
		if code != 0 || !strings.Contains(stderr, want) {
			t.Fatalf("-h (exit %d) lacks %q:\n%s", code, want, stderr)
		}
	}
	for _, sub := range []string{"token", "solve"} {
		stderr, code := runBinary(t, bin, nil, sub, "-h")
		if code != 0 || !strings.Contains(stderr, "Usage") || strings.Contains(stderr, "malformed") {
			t.Errorf("%s -h: exit %d, stderr:\n%s", sub, code, stderr)
		}
	}
}

// The embedded demo's second voucher walks the grab gate as the README
// does: the countdown, a challenge, `solve` (the sub-command), a ticket,
// then a grab refused without the ticket and sold with it.
func TestEmbeddedDemoWalksTheGate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, _, banner := startServiceOut(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": filepath.Join(dir, "flashsale.db")})
	user := userRe.FindStringSubmatch(banner)[1]

	info := postQuery(t, base, user, `{ serverTime voucher(id: "2") { seckill { requireTicket challenge startsInMs endsInMs } } }`)
	sk := info["voucher"].(map[string]any)["seckill"].(map[string]any)
	if sk["requireTicket"] != true || sk["challenge"] != "POW" || sk["startsInMs"].(float64) >= 0 || sk["endsInMs"].(float64) <= 0 {
		t.Fatalf("second demo voucher: %v", sk)
	}
	if code := grabDecided(t, base, user, `mutation { seckillVoucher(voucherId: "1", requestId: "walk-1") { code } }`); code != "OK" {
		t.Fatalf("the first demo voucher needs nothing: %s", code)
	}
	ch := postQuery(t, base, user, `{ seckillChallenge(voucherId: "2") { challenge difficulty } }`)["seckillChallenge"].(map[string]any)
	nonce, stderr, code := runBinaryOut(t, buildBinary(t), nil, "solve", ch["challenge"].(string))
	if code != 0 {
		t.Fatalf("solve: exit %d: %s", code, stderr)
	}
	ticket := postQuery(t, base, user, fmt.Sprintf(`{ seckillTicket(voucherId: "2", challenge: %q, nonce: %q) { ticket } }`,
		ch["challenge"], strings.TrimSpace(nonce)))["seckillTicket"].(map[string]any)["ticket"].(string)

	if code := grabCode(t, base, user, "2"); code != "FORBIDDEN" {
		t.Fatalf("grab without a ticket: %s", code)
	}
	if code := grabDecided(t, base, user, fmt.Sprintf(`mutation { seckillVoucher(voucherId: "2", requestId: "walk-2", ticket: %q) { code } }`, ticket)); code != "OK" {
		t.Fatalf("grab with the ticket: %s", code)
	}
}

// grabDecided sends a grab (with a request id, so a retry is the same
// purchase) until it is decided: UNAVAILABLE is "safe to retry later" (the
// contract), and a loaded machine can make the embedded node answer it
// with its production deadlines.
func grabDecided(t *testing.T, base, token, mutation string) string {
	t.Helper()
	for try := 0; ; try++ {
		code := postQuery(t, base, token, mutation)["seckillVoucher"].(map[string]any)["code"].(string)
		if code != "UNAVAILABLE" || try == 10 {
			return code
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The embedded mode's start ends with what a newcomer needs in sight:
// after every start-up line, the first operations, then the addresses and
// the tokens last (71 setting lines once came after them, and the tokens
// scrolled away).
func TestEmbeddedStartEndsWithTheAddressesAndTokens(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": filepath.Join(t.TempDir(), "flashsale.db")}
	ctx, cancel := context.WithCancel(t.Context())
	terminal := &syncBuffer{} // stdout and the log, as a terminal shows them
	done := make(chan error, 1)
	go func() { done <- serve(ctx, env, terminal, terminal) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(terminal.String(), "More tokens:") {
		if time.Now().After(deadline) {
			t.Fatalf("no banner in 30 s:\n%s", lastLines(terminal.String(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := terminal.String()
	order := []string{"msg=setting", "msg=listening", "mutation Grab", "Playground:", "Console:", "Admin token:", "User token:", "More tokens:"}
	at := -1
	for _, s := range order {
		i := strings.LastIndex(out, s)
		if i < at {
			t.Fatalf("%q comes before what should precede it (%v):\n%s", s, order, out)
		}
		at = i
	}
	if strings.Contains(out[at:], "msg=") {
		t.Fatalf("log lines after the tokens:\n%s", out[at:])
	}
}
