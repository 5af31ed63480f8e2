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
	lru "github.com/hashicorp/golang-lru/v2"

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
	// verified remembers tokens that passed verification: in a flash sale
	// the same users press "grab" again and again, and parsing and checking
	// a JWT is a fifth of a sold-out grab's CPU. Expiry is checked on every
	// hit; only successes are cached, so a bad token costs a full check.
	verified *lru.Cache[string, verifiedToken]
	now      func() time.Time
}

type verifiedToken struct {
	id      Identity
	expires time.Time // zero: no exp claim
}

// verifiedCacheSize bounds the cache (about 300 bytes a token).
const verifiedCacheSize = 100_000

// NewTokens returns a verifier/issuer for secret.
func NewTokens(secret string) *Tokens {
	cache, _ := lru.New[string, verifiedToken](verifiedCacheSize) // errors only for size <= 0
	t := &Tokens{secret: []byte(secret), verified: cache, now: time.Now}
	t.parser = jwt.NewParser(
		// Only HS256: this closes the "alg: none" and RS/HS confusion holes.
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithLeeway(tokenLeeway),
		jwt.WithTimeFunc(func() time.Time { return t.now() }),
	)
	return t
}

const tokenLeeway = 5 * time.Second

// Verify parses a token and returns the identity it carries. Any problem
// (bad signature, expired, wrong algorithm, malformed claims) is an
// UNAUTHENTICATED error whose message says what, never why in detail.
func (t *Tokens) Verify(token string) (Identity, error) {
	if v, ok := t.verified.Get(token); ok {
		if v.expires.IsZero() || t.now().Before(v.expires.Add(tokenLeeway)) {
			return v.id, nil
		}
		t.verified.Remove(token)
	}
	p, err := t.parse(token)
	if err != nil {
		return Identity{}, err
	}
	t.verified.Add(token, verifiedToken{id: p.Identity, expires: p.expires})
	return p.Identity, nil
}

type parsed struct {
	Identity
	expires time.Time
}

func (t *Tokens) parse(token string) (parsed, error) {
	var c claims
	_, err := t.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return t.secret, nil })
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return parsed{}, domain.Errorf(domain.CodeUnauthenticated, "token expired")
		}
		return parsed{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token")
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return parsed{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: sub must be a positive user id")
	}
	if c.Role != RoleUser && c.Role != RoleAdmin {
		return parsed{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: role must be user or admin")
	}
	out := parsed{Identity: Identity{UserID: uid, Role: c.Role}}
	if c.ExpiresAt != nil {
		out.expires = c.ExpiresAt.Time
	}
	return out, nil
}

// Issue signs a token for id that expires after ttl.
func (t *Tokens) Issue(id Identity, ttl time.Duration) (string, error) {
	now := t.now()
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
