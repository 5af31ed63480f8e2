package persistence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
)

// errNotPostgres is a DATABASE_URL whose server answers, but not as
// PostgreSQL does.
var errNotPostgres = errors.New("not a PostgreSQL server")

// pingPostgres pings a new Postgres pool within 5 s, and tells a URL that
// points at another service's port at once rather than at that deadline
// (a Redis port waits silently for a line end that PostgreSQL's messages
// never send: 5 s, then a TLS timeout in the error). A ping still
// unanswered after 300 ms (PostgreSQL answers in milliseconds) is joined
// by a line "PING" to the first host on a connection of its own: a
// line-based server answers it (Redis +PONG, HTTP a 400), and that answer
// is the error. A slow PostgreSQL closes that connection on a startup
// message of that length without a word (its log may note it); the ping
// goes on.
func pingPostgres(ctx context.Context, db *bun.DB, cfg *pgconn.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- db.PingContext(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(300 * time.Millisecond):
	}
	if err := askLine(ctx, cfg); err != nil {
		cancel()
		<-done
		return err
	}
	return <-done
}

// askLine sends "PING" and a line end to cfg's first host and reads for a
// second: an answer is not PostgreSQL's. A socket path, a dial that fails
// and silence are left to the ping.
func askLine(ctx context.Context, cfg *pgconn.Config) error {
	if strings.HasPrefix(cfg.Host, "/") {
		return nil
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return nil
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	reply := make([]byte, 64)
	n, _ := conn.Read(reply)
	if n == 0 || reply[0] == 'E' { // an ErrorResponse: PostgreSQL after all
		return nil
	}
	s := strings.TrimSpace(string(reply[:n]))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Errorf("%w at %s: it answered a line with %q (is this another service's port, Redis's say?)", errNotPostgres, addr, s)
}
