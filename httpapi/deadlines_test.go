package httpapi

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAClientThatNeverReadsIsCutAtTheWriteTimeout: an answer far larger
// than the sockets' buffers, to a client that sends its request and never
// reads. Its writes must fail once the write timeout has passed, freeing
// the connection and the answer (without it, 8 such clients held 2.5 GB).
func TestAClientThatNeverReadsIsCutAtTheWriteTimeout(t *testing.T) {
	t.Parallel()
	const write = 500 * time.Millisecond
	failed := make(chan time.Duration, 1)
	srv := httptest.NewServer(withDeadlines(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		chunk := make([]byte, 1<<20)
		for i := 0; i < 512; i++ { // 512 MB at most
			if _, err := w.Write(chunk); err != nil {
				failed <- time.Since(began)
				return
			}
		}
		failed <- -1
	}), time.Second, write))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: flashsale\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case took := <-failed:
		if took < 0 {
			t.Fatal("512 MB written to a client that reads nothing")
		}
		if took > write+2*time.Second {
			t.Fatalf("writes failed after %v, want about %v", took, write)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the answer is still being written 10 s later, with a %v write timeout", write)
	}
}
