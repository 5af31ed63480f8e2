package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawExchange writes req to addr from one goroutine while it reads the
// answer from another, as a client that sends a large request does: the
// node may answer, and stop reading, before the request is all sent.
func rawExchange(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(conn, req) }() // ends with the connection
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_ = resp.Body.Close()
	return resp
}

// TestOversizedHeadersAndURLsAreRefusedBeforeTheyAreRead: net/http read
// up to 1 MB of request line and headers with no token (its default
// MaxHeaderBytes), and a 1 MB URL whole before the guard's 414. With
// HTTP_MAX_HEADER_BYTES (60 KiB, plus net/http's 4 KiB of slack) both are
// answered 431 by net/http once it has read 64 KiB: a 414 would mean the
// URL was read whole and reached the handler.
func TestOversizedHeadersAndURLsAreRefusedBeforeTheyAreRead(t *testing.T) {
	t.Parallel()
	base, admin := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": t.TempDir() + "/flashsale.db",
	})
	addr := strings.TrimPrefix(base, "http://")
	body := `{"query":"{ __typename }"}`
	post := func(extra string) string {
		return "POST /query HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer " + admin +
			"\r\n" + extra + "Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	}
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"a 100 KiB header", post("X-Pad: " + strings.Repeat("a", 100<<10) + "\r\n"), http.StatusRequestHeaderFieldsTooLarge},
		{"1000 headers of 100 bytes", post(strings.Repeat("X-Pad: "+strings.Repeat("a", 91)+"\r\n", 1000)), http.StatusRequestHeaderFieldsTooLarge},
		{"a 1 MiB URL", "GET /query?query=" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: localhost\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"a 1 MiB path", "GET /" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: localhost\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"an 8 KiB header is served", post("X-Pad: " + strings.Repeat("a", 8<<10) + "\r\n"), http.StatusOK},
		{"56 KiB of headers are served", post(strings.Repeat("X-Pad: "+strings.Repeat("a", 1015)+"\r\n", 56)), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := rawExchange(t, addr, tc.req); resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}
