package httpapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// LocalHosts is the embedded mode's guard against DNS rebinding. That
// mode puts an admin token in its playground page and answers on the
// loopback interface; a page on another name that the attacker's DNS
// points at 127.0.0.1 is, to the browser, of the same origin as this
// node, so CORS does not stop it from reading the page and acting with
// the token. What it cannot change is the Host its requests carry: the
// guard answers only requests whose Host is localhost, a loopback
// address (127.0.0.1, [::1]) or one of the names listed
// (EMBEDDED_ALLOWED_HOSTS), and refuses any other before anything else
// reads the request.
type LocalHosts struct {
	names []string     // lower case, without a trailing dot
	addrs []netip.Addr // listed IP addresses
}

// NewLocalHosts returns the guard, with extra names or addresses allowed
// beside the loopback ones; each must pass CheckAllowedHost.
func NewLocalHosts(extra []string) (*LocalHosts, error) {
	h := &LocalHosts{}
	for _, e := range extra {
		if err := CheckAllowedHost(e); err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(e, "["), "]"), ".")
		if a, err := netip.ParseAddr(name); err == nil {
			h.addrs = append(h.addrs, a.Unmap())
			continue
		}
		h.names = append(h.names, strings.ToLower(name))
	}
	return h, nil
}

// CheckAllowedHost says what is wrong with a name listed as allowed, or
// returns nil: a host name or an IP address (IPv6 with or without
// brackets), without scheme, port or path.
func CheckAllowedHost(s string) error {
	switch {
	case s == "" || strings.ContainsAny(s, "/?#@* \t"):
		return fmt.Errorf("%q: want a host name or an IP address, without scheme, path or wildcard", s)
	case strings.HasPrefix(s, "[") || strings.HasSuffix(s, "]"):
		if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err != nil || !strings.HasSuffix(s, "]") {
			return fmt.Errorf("%q: want an IPv6 address in brackets, without port", s)
		}
	case strings.Count(s, ":") == 1:
		return fmt.Errorf("%q: want a host name or an IP address, without port (a Host's port is ignored)", s)
	}
	return nil
}

// Allows reports whether a request's Host (host[:port], an IPv6 address
// in brackets) names this machine or a listed name; the port is ignored.
func (h *LocalHosts) Allows(hostport string) bool {
	name, ok := hostOf(hostport)
	if !ok || name == "" {
		return false
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	if a, err := netip.ParseAddr(name); err == nil {
		a = a.Unmap()
		if a.IsLoopback() {
			return true
		}
		for _, l := range h.addrs {
			if a == l {
				return true
			}
		}
		return false
	}
	for _, n := range h.names {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}

// hostOf is the name or address of a Host header, without its port, its
// brackets and a trailing dot (localhost. is localhost); ok is false for
// what HTTP does not allow as a Host (RFC 9110 7.2, RFC 3986 3.2.2),
// refused rather than guessed at: an unclosed bracket, an IPv6 address
// without brackets, a port that is not a number.
func hostOf(hostport string) (name string, ok bool) {
	name, port := hostport, ""
	if strings.HasPrefix(name, "[") {
		end := strings.IndexByte(name, ']')
		if end < 0 {
			return "", false
		}
		name, port = name[1:end], name[end+1:]
		if port != "" {
			if port[0] != ':' {
				return "", false
			}
			port = port[1:]
		}
	} else if i := strings.IndexByte(name, ':'); i >= 0 {
		if strings.IndexByte(name[i+1:], ':') >= 0 {
			return "", false
		}
		name, port = name[:i], name[i+1:]
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return strings.TrimSuffix(name, "."), true
}

// Guard answers a request whose Host is not allowed with 421 Misdirected
// Request and a fixed JSON body (a GraphQL error, code FORBIDDEN), and
// passes the others to next. It reads nothing but the Host, so a refusal
// costs a comparison or two and carries nothing of the node's.
func (h *LocalHosts) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Allows(r.Host) {
			hdr := w.Header()
			hdr.Set("Content-Type", "application/json")
			hdr.Set("X-Content-Type-Options", "nosniff")
			hdr.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusMisdirectedRequest)
			_, _ = w.Write(foreignHostAnswer)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// foreignHostAnswer is the refusal of a request to another Host, written
// once.
var foreignHostAnswer = []byte(`{"errors":[{"message":"this node runs in embedded mode and answers only requests addressed to localhost, 127.0.0.1 or [::1], or to a name listed in EMBEDDED_ALLOWED_HOSTS; this request's Host header names another","extensions":{"code":"FORBIDDEN"}}]}` + "\n")
