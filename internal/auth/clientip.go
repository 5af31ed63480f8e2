package auth

import (
	"context"
	"net"
)

type clientIPKey struct{}

// WithRemoteAddr records the caller's address (a request's RemoteAddr,
// host and port) for the per-IP limits, the gate and the blocklists.
// Forwarding headers are not trusted: behind a proxy, the proxy should
// apply the per-IP limit itself.
func WithRemoteAddr(ctx context.Context, remoteAddr string) context.Context {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return context.WithValue(ctx, clientIPKey{}, host)
	}
	return ctx
}

// ClientIP is the address WithRemoteAddr recorded, "" when none was.
func ClientIP(ctx context.Context) string {
	ip, _ := ctx.Value(clientIPKey{}).(string)
	return ip
}
