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
		next.ServeHTTP(w, r.WithContext(withRemoteIP(r.Context(), r.RemoteAddr)))
	})
}

// withRemoteIP is withClientIP for a context alone (the compiled grab
// path, which passes its context on without cloning the request).
func withRemoteIP(ctx context.Context, remoteAddr string) context.Context {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return context.WithValue(ctx, clientIPKey{}, host)
	}
	return ctx
}

func clientIP(ctx context.Context) string {
	ip, _ := ctx.Value(clientIPKey{}).(string)
	return ip
}
