package graph

import (
	"context"
	"net"
	"net/http"
)

type clientIPKey struct{}

// withClientIP records the peer address of each request for the per-IP
// rate limit. Forwarding headers are not trusted: behind a proxy, the
// proxy should apply the per-IP limit itself.
func withClientIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			r = r.WithContext(context.WithValue(r.Context(), clientIPKey{}, host))
		}
		next.ServeHTTP(w, r)
	})
}

func clientIP(ctx context.Context) string {
	ip, _ := ctx.Value(clientIPKey{}).(string)
	return ip
}
