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
	// Expires is the token's exp (zero: none). It travels with the
	// identity because a websocket authenticates once, at connection_init,
	// and then runs operations for as long as it stays open: FromContext
	// re-checks it so an expired token cannot keep grabbing.
	Expires time.Time
}

// IsAdmin reports whether the caller has the admin role.
func (id Identity) IsAdmin() bool { return id.Role == RoleAdmin }

// expiredAt reports whether the token had expired at now, with the same
// leeway as verification.
func (id Identity) expiredAt(now time.Time) bool {
	return !id.Expires.IsZero() && !now.Before(id.Expires.Add(tokenLeeway))
}

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
	verified *lru.Cache[string, Identity]
	now      func() time.Time
}

// verifiedCacheSize bounds the cache (about 300 bytes a token).
const verifiedCacheSize = 100_000

// NewTokens returns a verifier/issuer for secret.
func NewTokens(secret string) *Tokens {
	cache, _ := lru.New[string, Identity](verifiedCacheSize) // errors only for size <= 0
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
	if id, ok := t.verified.Get(token); ok {
		if !id.expiredAt(t.now()) {
			return id, nil
		}
		t.verified.Remove(token)
	}
	id, err := t.parse(token)
	if err != nil {
		return Identity{}, err
	}
	t.verified.Add(token, id)
	return id, nil
}

// errExpired is shared by verification and the per-operation re-check.
var errExpired = domain.Errorf(domain.CodeUnauthenticated, "token expired")

func (t *Tokens) parse(token string) (Identity, error) {
	var c claims
	_, err := t.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return t.secret, nil })
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return Identity{}, errExpired
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
	id := Identity{UserID: uid, Role: c.Role}
	if c.ExpiresAt != nil {
		id.Expires = c.ExpiresAt.Time
	}
	return id, nil
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

// FromContext returns the caller's identity or an UNAUTHENTICATED error,
// also once the token has expired since it was verified (a websocket's
// identity is verified only at connection_init).
func FromContext(ctx context.Context) (Identity, error) {
	r, ok := ctx.Value(ctxKey{}).(result)
	if !ok {
		return Identity{}, domain.ErrUnauthenticated
	}
	if r.err != nil {
		return Identity{}, r.err
	}
	if r.id.expiredAt(time.Now()) {
		return Identity{}, errExpired
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
