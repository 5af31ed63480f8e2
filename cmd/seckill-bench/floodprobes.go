package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// floodProbe is one anonymous request a flood repeats: send sends its
// i-th copy and returns what the service answered, in a word or two (an
// HTTP status, a GraphQL error code, a websocket close code), or an
// error when it could not tell.
type floodProbe struct {
	name string
	// about says what one request is, for the report.
	about string
	// prepare, if set, runs once in the flooding process before the
	// flood: state the probe needs the service to hold (sockets at a cap).
	prepare func(ctx context.Context, f *flooder) error
	send    func(ctx context.Context, f *flooder, i int) (string, error)
	// want are the answers expected of this probe; any other is counted
	// and reported as unexpected.
	want []string
}

// idleProbe sends nothing: its flood is the clients' core kept busy, so
// that the legitimate user's latency then is the rig's own effect.
const idleProbe = "rig-busy"

// floodProbes are the worst anonymous requests known, one flood each.
// Each GraphQL document carries a fresh comment, so that no cache of the
// service answers it from memory.
var floodProbes = []floodProbe{
	{name: idleProbe, about: "nothing sent: the clients' core busy, the rig's own effect",
		send: func(ctx context.Context, _ *flooder, i int) (string, error) {
			spin(time.Millisecond)
			return "spun", nil
		}, want: []string{"spun"}},
	{name: "typename", about: "`{ __typename }` with a fresh comment",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, "", fmt.Sprintf("#%d\n{ __typename }", i))
		}, want: []string{"200 data"}},
	{name: "introspection-aliases", about: "100 aliases of `__schema { types { name fields { name args { name } } } }` (5 KB)",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, "", fmt.Sprintf("#%d\n%s", i, aliasedIntrospection))
		}},
	{name: "unknown-directives", about: "990 unknown directives (3 KB)",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, "", fmt.Sprintf("#%d\n{ __typename%s }", i, strings.Repeat(" @x", 990)))
		}},
	{name: "document-60k", about: "a distinct 60 KB document (a comment and `{ __typename }`)",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, "", fmt.Sprintf("# %d %s\n{ __typename }", i, filler60))
		}},
	{name: "apq-unknown-hash", about: "a persisted query by a random hash",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			b := make([]byte, 32)
			_, _ = rand.Read(b)
			return f.post(ctx, "", map[string]any{"extensions": map[string]any{
				"persistedQuery": map[string]any{"version": 1, "sha256Hash": hex.EncodeToString(b)}}})
		}},
	{name: "apq-register-60k", about: "a 60 KB persisted-query registration",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			q := fmt.Sprintf("# %d %s\n{ __typename }", i, filler60)
			sum := sha256.Sum256([]byte(q))
			return f.post(ctx, "", map[string]any{"query": q, "extensions": map[string]any{
				"persistedQuery": map[string]any{"version": 1, "sha256Hash": hex.EncodeToString(sum[:])}}})
		}},
	{name: "forged-token", about: "`{ __typename }` with a token of a bad signature",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, f.forged, fmt.Sprintf("#%d\n{ __typename }", i))
		}},
	// One user's token, four clients: what any signed-in user can send.
	{name: "user-pages", about: "`vouchers(first: 100)` of long texts with one user's token",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, f.userTokens[0], fmt.Sprintf("#%d\n{ vouchers(first: 100) { edges { node { id title subTitle rules } } } }", i))
		}},
	{name: "user-page-aliases", about: "5 aliases of that page with one user's token",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, f.userTokens[0], fmt.Sprintf("#%d\n{%s }", i, pageAliases5))
		}},
	{name: "user-unknown-60k", about: "60 KB of unknown 600-character field names with one user's token",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, f.userTokens[0], fmt.Sprintf("#%d\n%s", i, unknownFields60k))
		}},
	{name: "user-schema-aliases", about: "13 aliases of `__schema { types { name fields { name args { name type { name } } } } }` with one user's token",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, f.userTokens[0], fmt.Sprintf("#%d\n{%s }", i, schemaAliases13))
		}},
	{name: "anon-unknown-types", about: "100 variables of unknown 600-character types, no token",
		send: func(ctx context.Context, f *flooder, i int) (string, error) {
			return f.graphql(ctx, "", fmt.Sprintf("#%d\n%s", i, unknownTypes100))
		}},
	{name: "header-100k", about: "100 KiB of headers",
		send: func(ctx context.Context, f *flooder, _ int) (string, error) {
			return f.raw(ctx, bigHeaderRequest)
		}, want: []string{"431"}},
	{name: "url-1mib", about: "a 1 MiB URL",
		send: func(ctx context.Context, f *flooder, _ int) (string, error) {
			return f.raw(ctx, bigURLRequest)
		}, want: []string{"431"}},
	{name: "ws-over-ip-cap", about: "a websocket handshake over the per-address cap (the cap held by the flooding address)",
		prepare: holdAddressCap,
		send: func(ctx context.Context, f *flooder, _ int) (string, error) {
			c, err := f.dial(ctx)
			if err != nil {
				return handshakeOutcome(err)
			}
			return closedWith(ctx, c)
		}, want: []string{"close 4429"}},
	{name: "ws-message-65k", about: "a websocket and a 65 KiB first message, no token",
		send: func(ctx context.Context, f *flooder, _ int) (string, error) {
			c, err := f.dial(ctx)
			if err != nil {
				return handshakeOutcome(err)
			}
			_ = c.Write(ctx, websocket.MessageText, oversizedMessage)
			return closedWith(ctx, c)
		}, want: []string{"close 1009"}},
}

var (
	aliasedIntrospection = func() string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 100 {
			fmt.Fprintf(&b, " a%d: __schema { types { name fields { name args { name } } } }", i)
		}
		b.WriteString(" }")
		return b.String()
	}()
	filler60         = strings.Repeat("p", 60<<10)
	oversizedMessage = []byte(`{"type":"connection_init","payload":{}` + strings.Repeat(" ", 65<<10) + `}`)
	bigHeaderRequest = []byte("GET /query HTTP/1.1\r\nHost: flashsale\r\nX-Pad: " + strings.Repeat("a", 100<<10) + "\r\n\r\n")
	bigURLRequest    = []byte("GET /query?query=" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: flashsale\r\n\r\n")
)

// probeNamed finds a probe by name.
func probeNamed(name string) (floodProbe, bool) {
	for _, p := range floodProbes {
		if p.name == name {
			return p, true
		}
	}
	return floodProbe{}, false
}

// The documents of the user-token probes and of unknown types.
var (
	unknownFields60k = func() string {
		var b strings.Builder
		b.WriteString("{")
		for j := 0; b.Len() < 60<<10; j++ {
			fmt.Fprintf(&b, " f%d_%s", j, strings.Repeat("q", 600))
		}
		return b.String() + " }"
	}()
	unknownTypes100 = func() string {
		var b strings.Builder
		b.WriteString("query(")
		for j := range 100 {
			fmt.Fprintf(&b, "$v%d: T%d_%s ", j, j, strings.Repeat("q", 600))
		}
		return b.String() + ") { __typename }"
	}()
	pageAliases5 = func() string {
		var b strings.Builder
		for j := range 5 {
			fmt.Fprintf(&b, " p%d: vouchers(first: 100) { edges { node { id title subTitle rules } } }", j)
		}
		return b.String()
	}()
	schemaAliases13 = func() string {
		var b strings.Builder
		for j := range 13 {
			fmt.Fprintf(&b, " s%d: __schema { types { name fields { name args { name type { name } } } } }", j)
		}
		return b.String()
	}()
)

// spin keeps this goroutine's core busy for d.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// flooder is the flooding side: the service's address, the loopback
// address it floods from, and the tokens its state needs.
type flooder struct {
	addr   string // host:port
	from   string // the local address, 127.0.0.1
	client *http.Client
	dialer *net.Dialer
	// forged is a token whose signature is wrong.
	forged string
	// userTokens are valid tokens of distinct users, for the sockets a
	// probe holds open as the service's state (never for the probe).
	userTokens []string
	held       []*websocket.Conn
}

func newFlooder(addr, from string, clients int, userTokens []string, forged string) *flooder {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &flooder{addr: addr, from: from, dialer: d, forged: forged, userTokens: userTokens,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: d.DialContext, MaxIdleConnsPerHost: clients, MaxIdleConns: clients,
		}}}
}

func (f *flooder) graphql(ctx context.Context, token, query string) (string, error) {
	return f.post(ctx, token, map[string]any{"query": query})
}

// post sends body to /query and classifies the answer: its status and
// the first error's code, or "data".
func (f *flooder) post(ctx context.Context, token string, body any) (string, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.addr+"/query", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.Copy(io.Discard, resp.Body)
	return strconv.Itoa(resp.StatusCode) + " " + answerCode(head[:n]), nil
}

// answerCode is the first extensions.code in the start of an answer, or
// "data" for one without errors.
func answerCode(head []byte) string {
	_, rest, ok := bytes.Cut(head, []byte(`"code":"`))
	if !ok {
		if bytes.Contains(head, []byte(`"errors"`)) {
			return "error"
		}
		return "data"
	}
	code, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(code)
}

// raw writes req on a connection of its own while reading the answer's
// status, as a client whose request the service stops reading would.
func (f *flooder) raw(ctx context.Context, req []byte) (string, error) {
	conn, err := f.dialer.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = conn.Write(req) }() // ends with the connection
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", fmt.Errorf("no answer: %w", err)
	}
	_ = resp.Body.Close()
	return strconv.Itoa(resp.StatusCode), nil
}

// dial opens a graphql-transport-ws socket; the caller closes it.
func (f *flooder) dial(ctx context.Context) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+f.addr+"/query", &websocket.DialOptions{
		Subprotocols: []string{"graphql-transport-ws"},
		HTTPClient:   &http.Client{Transport: &http.Transport{DialContext: f.dialer.DialContext}},
	})
	if err != nil {
		if resp != nil {
			return nil, &refusedHandshake{status: resp.StatusCode}
		}
		return nil, fmt.Errorf("dial: %w", err)
	}
	return c, nil
}

// refusedHandshake is an upgrade answered without switching protocols.
type refusedHandshake struct{ status int }

func (e *refusedHandshake) Error() string { return "handshake answered " + strconv.Itoa(e.status) }

// handshakeOutcome is a refused handshake as an answer (429 under a
// per-address rate), any other dial error as an error.
func handshakeOutcome(err error) (string, error) {
	var refused *refusedHandshake
	if errors.As(err, &refused) {
		return "handshake " + strconv.Itoa(refused.status), nil
	}
	return "", err
}

// closedWith reads c until the service closes it and returns the code.
func closedWith(ctx context.Context, c *websocket.Conn) (string, error) {
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		if code := websocket.CloseStatus(err); code != -1 {
			return "close " + strconv.Itoa(int(code)), nil
		}
		return "", fmt.Errorf("read: %w", err)
	}
}

// holdAddressCap opens acknowledged sockets from the flooding address
// until the service closes one with 4429: the address is then at its cap
// and every further handshake from it is over the cap.
func holdAddressCap(ctx context.Context, f *flooder) error {
	for i := 0; ; i++ {
		if i > 4096 {
			return errors.New("no per-address websocket cap within 4096 sockets")
		}
		c, err := f.dial(ctx)
		if err != nil {
			return err
		}
		token := f.userTokens[i%len(f.userTokens)]
		init := `{"type":"connection_init","payload":{"Authorization":"Bearer ` + token + `"}}`
		if err := c.Write(ctx, websocket.MessageText, []byte(init)); err != nil {
			_ = c.CloseNow()
			return fmt.Errorf("connection_init: %w", err)
		}
		acked, err := awaitAck(ctx, c)
		if err != nil {
			return err
		}
		if !acked {
			return nil // the cap: this one was closed
		}
		f.held = append(f.held, c)
		// The held sockets answer the service's pings from here on.
		go func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		}()
	}
}

// awaitAck reads c until connection_ack (true) or its close with 4429
// (false).
func awaitAck(ctx context.Context, c *websocket.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		_, m, err := c.Read(ctx)
		switch {
		case err == nil && bytes.Contains(m, []byte(`"connection_ack"`)):
			return true, nil
		case err == nil:
		case websocket.CloseStatus(err) == 4429:
			_ = c.CloseNow()
			return false, nil
		default:
			_ = c.CloseNow()
			return false, fmt.Errorf("a socket under the cap: %w", err)
		}
	}
}

func (f *flooder) close() {
	for _, c := range f.held {
		_ = c.CloseNow()
	}
}
