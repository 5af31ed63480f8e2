package graph_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// Live updates as a browser's client sees them: the real graphql-ws client
// (pinned in e2e/live/package-lock.json) subscribes to stockChanged on
// node 0, ten grabs go through HTTP on node 1, and it sees remaining fall
// N -> N-10 (first event at once, last = final) while a subscriber that
// stopped reading is connected. It skips where Node is not installed, and
// where the client cannot be installed (npm ci offline).
func TestGraphQLWSClientSeesStockFallAcrossNodes(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed: this test runs the graphql-ws npm client")
	}
	dir := filepath.Join("..", "e2e", "live")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "graphql-ws")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("npm not installed: cannot install the pinned graphql-ws client")
		}
		cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("npm ci failed (offline?): %v\n%s", err, out)
		}
	}

	s, nodes := newLiveNodes(t, 2)
	const stock, grabs = 20, 10
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	tokens := make([]string, grabs)
	for i := range tokens {
		tokens[i] = s.token(t, int64(100+i), auth.RoleUser)
	}
	grabTokens, _ := json.Marshal(tokens)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "stock.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"WS_URL=ws"+strings.TrimPrefix(nodes[0].http.URL, "http")+"/query",
		"HTTP_URL="+nodes[1].http.URL+"/query",
		"VOUCHER_ID="+strconv.FormatInt(v.ID, 10),
		"STOCK="+strconv.Itoa(stock),
		"TOKEN="+s.token(t, 2, auth.RoleUser),
		"GRAB_TOKENS="+string(grabTokens),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node: %s", out)
	if err != nil {
		t.Fatalf("graphql-ws client test: %v", err)
	}
}
