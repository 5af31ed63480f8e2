package node

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/config"
	"flashsale/config/owners"
)

// embeddedNode starts an embedded-mode node (in-process Redis, SQLite in
// the test's directory) on a loopback port with env over the defaults,
// serves it until the test ends and returns its address.
func embeddedNode(tb testing.TB, env map[string]string) string {
	tb.Helper()
	all := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": filepath.Join(tb.TempDir(), "flashsale.db")}
	for k, v := range env {
		all[k] = v
	}
	cfg, err := config.Load(nil, func(k string) string { return all[k] }, io.Discard, owners.Table())
	if err != nil {
		tb.Fatal(err)
	}
	if !cfg.Embedded() {
		tb.Fatal("not embedded mode")
	}
	n, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatalf("start node: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("run: %v", err)
		}
	})
	return n.a.listener.Addr().String()
}

// exchange sends one raw request to addr (the Host header as given,
// none when host is "-"; a body, if any, with its length) and returns
// the answer's status and body.
func exchange(tb testing.TB, addr, method, path, host, body string, headers ...string) (int, string) {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var req strings.Builder
	proto := "HTTP/1.1"
	if host == "-" {
		proto = "HTTP/1.0" // HTTP/1.1 requires a Host; 1.0 may go without
	}
	req.WriteString(method + " " + path + " " + proto + "\r\n")
	if host != "-" {
		req.WriteString("Host: " + host + "\r\n")
	}
	for _, h := range headers {
		req.WriteString(h + "\r\n")
	}
	if body != "" {
		req.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	req.WriteString("Connection: close\r\n\r\n" + body)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatalf("%s %s, Host %q: %v", method, path, host, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// pageToken is the bearer token the playground page puts in its headers.
var pageToken = regexp.MustCompile(`Bearer ([A-Za-z0-9._-]+)`)

// Embedded mode answers only requests addressed to this machine: a page
// on another name that DNS points at 127.0.0.1 (rebinding) gets a refusal
// on every route, and never the admin token of the playground page; local
// Hosts and the listed names get the page with its token.
func TestEmbeddedModeAnswersOnlyLocalHosts(t *testing.T) {
	t.Parallel()
	addr := embeddedNode(t, map[string]string{"EMBEDDED_ALLOWED_HOSTS": "flashsale.test,192.0.2.7"})
	_, port, _ := net.SplitHostPort(addr)

	// The page and its token, as a local Host gets them.
	code, page := exchange(t, addr, "GET", "/", "localhost:"+port, "")
	m := pageToken.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("GET / from localhost: %d, token found: %v", code, m != nil)
	}
	token := m[1]

	t.Run("local and listed Hosts get the page with the token", func(t *testing.T) {
		t.Parallel()
		for _, host := range []string{
			"localhost", "localhost:" + port, "LocalHost:" + port, "localhost.:" + port,
			"127.0.0.1:" + port, "127.0.0.1", "[::1]:" + port, "[::1]",
			"flashsale.test:" + port, "FLASHSALE.test", "192.0.2.7:" + port,
		} {
			code, body := exchange(t, addr, "GET", "/", host, "")
			if code != http.StatusOK || !strings.Contains(body, token) {
				t.Errorf("Host %q: %d, token in the page: %v; want 200 with the token", host, code, strings.Contains(body, token))
			}
		}
	})

	t.Run("a foreign Host is refused on every route, without a token", func(t *testing.T) {
		t.Parallel()
		hosts := []string{
			"attacker.example", "attacker.example:" + port, "localhost.attacker.example:" + port,
			"127.0.0.1.nip.io:" + port, "flashsale.test.attacker.example", "192.0.2.8:" + port,
			"[::2]:" + port, "::1", "[::1", "localhost:http", "-",
		}
		routes := []struct {
			method, path, body string
			headers            []string
		}{
			{"GET", "/", "", nil},
			{"GET", "/query?query=%7B__typename%7D", "", []string{"Authorization: Bearer " + token}},
			{"POST", "/query", `{"query":"{ __typename }"}`, []string{"Authorization: Bearer " + token, "Content-Type: application/json"}},
			{"GET", "/query", "", []string{"Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol: graphql-transport-ws"}},
			{"GET", "/healthz", "", nil},
			{"GET", "/metrics", "", nil},
		}
		for _, host := range hosts {
			for _, r := range routes {
				code, body := exchange(t, addr, r.method, r.path, host, r.body, r.headers...)
				if code != http.StatusMisdirectedRequest || !strings.Contains(body, "FORBIDDEN") {
					t.Errorf("%s %s, Host %q: %d %.80q; want 421 FORBIDDEN", r.method, r.path, host, code, body)
				}
				if strings.Contains(body, token) || strings.Contains(body, "Bearer") || strings.Contains(body, "eyJ") {
					t.Errorf("%s %s, Host %q: the answer holds a token", r.method, r.path, host)
				}
			}
		}
	})

	t.Run("a local Host's query runs with the token", func(t *testing.T) {
		t.Parallel()
		code, answer := exchange(t, addr, "POST", "/query", "127.0.0.1:"+port, `{"query":"{ __typename }"}`,
			"Authorization: Bearer "+token, "Content-Type: application/json")
		if code != http.StatusOK || !strings.Contains(answer, `"__typename":"Query"`) {
			t.Fatalf("POST /query from 127.0.0.1: %d %q", code, answer)
		}
	})
}
