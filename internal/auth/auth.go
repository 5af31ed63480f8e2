// Package auth verifies and issues the service's bearer tokens (JWT, HS256)
// and carries the caller's identity through a request's context.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"flashsale/domain"
)

// Role is the `role` claim.
type Role string

// The contract's roles.
const (
	RoleUser  Role = "user"
	RoleAdmin Role = "admin"
)

// Identity is who is calling.
type Identity struct {
	UserID int64
	Role   Role
}

// IsAdmin reports whether the caller has the admin role.
func (id Identity) IsAdmin() bool { return id.Role == RoleAdmin }

type claims struct {
	Role Role `json:"role"`
	jwt.RegisteredClaims
}

// Tokens verifies and issues HS256 tokens with one shared secret.
type Tokens struct {
	secret []byte
	parser *jwt.Parser
}

// NewTokens returns a verifier/issuer for secret.
func NewTokens(secret string) *Tokens {
	return &Tokens{
		secret: []byte(secret),
		// Only HS256: this closes the "alg: none" and RS/HS confusion holes.
		parser: jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithLeeway(5*time.Second)),
	}
}

// Verify parses a token and returns the identity it carries. Any problem
// (bad signature, expired, wrong algorithm, malformed claims) is an
// UNAUTHENTICATED error whose message says what, never why in detail.
func (t *Tokens) Verify(token string) (Identity, error) {
	var c claims
	_, err := t.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return t.secret, nil })
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "token expired")
		}
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token")
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: sub must be a positive user id")
	}
	if c.Role != RoleUser && c.Role != RoleAdmin {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: role must be user or admin")
	}
	return Identity{UserID: uid, Role: c.Role}, nil
}

// Issue signs a token for id that expires after ttl.
func (t *Tokens) Issue(id Identity, ttl time.Duration) (string, error) {
	now := time.Now()
	c := claims{
		Role: id.Role,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   strconv.FormatInt(id.UserID, 10),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

type ctxKey struct{}

type result struct {
	id  Identity
	err error
}

// WithIdentity returns ctx carrying the outcome of authentication: an
// identity, or the error that the first field needing one will report.
func WithIdentity(ctx context.Context, id Identity, err error) context.Context {
	return context.WithValue(ctx, ctxKey{}, result{id: id, err: err})
}

// FromContext returns the caller's identity or an UNAUTHENTICATED error.
func FromContext(ctx context.Context) (Identity, error) {
	r, ok := ctx.Value(ctxKey{}).(result)
	if !ok {
		return Identity{}, domain.ErrUnauthenticated
	}
	if r.err != nil {
		return Identity{}, r.err
	}
	return r.id, nil
}

// VerifyHeader authenticates an Authorization header value
// ("Bearer <token>").
func (t *Tokens) VerifyHeader(h string) (Identity, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return Identity{}, domain.ErrUnauthenticated
	}
	return t.Verify(strings.TrimSpace(token))
}

// Middleware authenticates each HTTP request's Authorization header and
// stores the outcome in its context. It rejects nothing itself: which
// operations need which role is the GraphQL layer's decision, and a
// websocket upgrade authenticates in its connection_init instead.
func (t *Tokens) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			id, err := t.VerifyHeader(h)
			r = r.WithContext(WithIdentity(r.Context(), id, err))
		}
		next.ServeHTTP(w, r)
	})
}
