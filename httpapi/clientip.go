package httpapi

import (
	"net/http"

	"flashsale/internal/auth"
)

// withClientIP records the peer address of each request (see
// auth.WithRemoteAddr); the compiled grab path, which passes its context
// on without cloning the request, records it itself.
func withClientIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(auth.WithRemoteAddr(r.Context(), r.RemoteAddr)))
	})
}
