package httpapi_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
)

func TestOnlyWebsocketUpgradesGoToTheWebsocketTransport(t *testing.T) {
	t.Parallel()
	s := nodetest.Start(t, nodetest.Options{})
	user := s.Token(t, 4, auth.RoleUser)
	const body = `{"query":"{ __typename }"}`
	cases := []struct {
		name, method, target, body string
		header                     map[string]string
	}{
		{"POST with Upgrade: h2c (curl --http2)", http.MethodPost, "/query", body, map[string]string{"Upgrade": "h2c", "Connection": "Upgrade, HTTP2-Settings", "HTTP2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA"}},
		{"GET with Upgrade: h2c", http.MethodGet, "/query?query=%7B__typename%7D", "", map[string]string{"Upgrade": "h2c", "Connection": "Upgrade"}},
		{"POST with Upgrade: TLS/1.2", http.MethodPost, "/query", body, map[string]string{"Upgrade": "TLS/1.2", "Connection": "Upgrade"}},
		{"POST with Upgrade: websocket but no Connection: upgrade", http.MethodPost, "/query", body, map[string]string{"Upgrade": "websocket"}},
		{"GET with Upgrade: websocket but Connection: keep-alive", http.MethodGet, "/query?query=%7B__typename%7D", "", map[string]string{"Upgrade": "websocket", "Connection": "keep-alive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			if tc.method == http.MethodPost {
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("Authorization", "Bearer "+user)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			r := s.Serve(t, req)
			if r.Status != http.StatusOK || len(r.Errors) > 0 || string(r.Data) != `{"__typename":"Query"}` {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
		})
	}

	t.Run("Upgrade: WebSocket in any case, Connection among other tokens", func(t *testing.T) {
		srv := httptest.NewServer(s.GraphQL)
		t.Cleanup(srv.Close)
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /query HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("status %d, want 101", resp.StatusCode)
		}
	})
}
