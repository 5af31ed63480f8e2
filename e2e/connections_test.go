package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestNewConnectionsAreAdmittedPerClientAddress: the HTTP listener passes
// each client address's new connections on at CONN_PER_IP_PER_SEC after
// a burst of CONN_PER_IP_BURST, and with no wait (CONN_PER_IP_WAIT=0)
// closes one over the rate unread; another address is served. The
// listener's own behaviour is tested in internal/connlimit; this is its
// place in front of net/http.
func TestNewConnectionsAreAdmittedPerClientAddress(t *testing.T) {
	t.Parallel()
	base, _ := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": t.TempDir() + "/flashsale.db",
		"CONN_PER_IP_PER_SEC": "1", "CONN_PER_IP_BURST": "2", "CONN_PER_IP_WAIT": "0s",
	})
	addr := strings.TrimPrefix(base, "http://")
	healthz := func(from string) (int, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i := range 2 {
		if code, err := healthz("127.0.0.3"); code != http.StatusOK {
			t.Fatalf("connection %d within the burst: %d, %v; want 200", i+1, code, err)
		}
	}
	if code, err := healthz("127.0.0.3"); err == nil {
		t.Fatalf("a third connection at once from the same address was answered %d; want it closed unread", code)
	}
	if code, err := healthz("127.0.0.4"); code != http.StatusOK {
		t.Fatalf("another address: %d, %v; want 200", code, err)
	}
}
