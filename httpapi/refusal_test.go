package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"flashsale/node"
	"flashsale/testkit/nodetest"
)

// rawConn is one keep-alive HTTP/1.1 connection to a server.
type rawConn struct {
	tb testing.TB
	c  net.Conn
	r  *bufio.Reader
}

func dialRaw(tb testing.TB, srv *httptest.Server) *rawConn {
	tb.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return &rawConn{tb: tb, c: c, r: bufio.NewReader(c)}
}

// send writes a POST /query with body, or with its headers alone when
// headersOnly (Content-Length says len(body)).
func (rc *rawConn) send(body string, headersOnly bool) {
	rc.tb.Helper()
	req := fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if !headersOnly {
		req += body
	}
	if _, err := io.WriteString(rc.c, req); err != nil {
		rc.tb.Fatal(err)
	}
}

// read reads the next answer within 5 s; nil once the server has closed
// the connection.
func (rc *rawConn) read() (*http.Response, []byte) {
	rc.tb.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(rc.r, nil)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return nil, nil
	}
	if err != nil {
		rc.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.tb.Fatal(err)
	}
	return resp, b
}

const typename = `{"query":"{ __typename }"}`

// A client whose SHED_IP_PER_SEC allowance is spent is answered 429 with
// Retry-After and RATE_LIMITED (retryAfterMs) before its body is read: a
// body of 8 KiB that never comes, its connection closed rather than read;
// a small body that is no JSON, refused unparsed, its connection kept.
func TestAClientOverItsAllowanceIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	t.Parallel()
	srv := serveAsNode(t, context.Background(), startNode(t, map[string]string{"SHED_IP_PER_SEC": "1"}, node.Hooks{}))
	rc := dialRaw(t, srv)
	for range 2 { // the burst
		rc.send(typename, false)
		if resp, b := rc.read(); resp == nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("within the burst: %v %s", resp, b)
		}
	}
	for _, tc := range []struct {
		name        string
		body        string
		headersOnly bool
		closed      bool
	}{
		{"a small body that is no JSON", "nope", false, false},
		{"a large body that never comes", strings.Repeat(" ", 8<<10), true, true},
	} {
		rc.send(tc.body, tc.headersOnly)
		resp, b := rc.read()
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || resp.Close != tc.closed {
			t.Fatalf("%s: %v %s; want 429, Retry-After 1, closed %v", tc.name, resp, b, tc.closed)
		}
		var answer struct{ Errors []nodetest.Error }
		if err := json.Unmarshal(b, &answer); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, b)
		}
		e := nodetest.WantCode(t, answer.Errors, "RATE_LIMITED")
		if ms, _ := e.Extensions["retryAfterMs"].(float64); ms < 1 || ms > 1000 {
			t.Fatalf("%s: retryAfterMs %v, want 1..1000", tc.name, e.Extensions["retryAfterMs"])
		}
	}
}

// A keep-alive connection whose answers are refusals 8 times in a row is
// closed after the 8th (Connection: close), whichever layer refused:
// here the edge (SHED_IP_PER_SEC, 429) and admission (RATE_IP_PER_SEC,
// in Redis: 200 with Retry-After). Answers that are no refusals (the
// burst, a token refilled meanwhile) start the count again.
func TestAConnectionCollectingRefusalsIsClosed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"refused at the edge", map[string]string{"SHED_IP_PER_SEC": "1"}},
		{"refused by admission", map[string]string{"RATE_IP_PER_SEC": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := dialRaw(t, serveAsNode(t, context.Background(), startNode(t, tc.env, node.Hooks{})))
			inARow := 0
			for i := range 40 {
				rc.send(typename, false)
				resp, b := rc.read()
				if resp == nil {
					t.Fatalf("closed without Connection: close, after %d refusals in a row", inARow)
				}
				refused := resp.Header.Get("Retry-After") != ""
				if refused != bytes.Contains(b, []byte(`"RATE_LIMITED"`)) {
					t.Fatalf("answer %d: Retry-After %q, body %s", i, resp.Header.Get("Retry-After"), b)
				}
				inARow++
				if !refused {
					inARow = 0
				}
				if resp.Close {
					if inARow != 8 {
						t.Fatalf("closed after %d refusals in a row, want 8", inARow)
					}
					if resp, _ := rc.read(); resp != nil {
						t.Fatal("an answer after Connection: close")
					}
					return
				}
				if inARow >= 8 {
					t.Fatalf("%d refusals in a row, the connection still open", inARow)
				}
			}
			t.Fatal("40 answers, the connection still open")
		})
	}
}
