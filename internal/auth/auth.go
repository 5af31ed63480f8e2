// Package auth verifies and issues the service's bearer tokens (JWT, HS256)
// and carries the caller's identity through a request's context.
package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
	// Expires is the token's exp (every accepted token has one). It
	// travels with the identity because a websocket authenticates once, at
	// connection_init, and then runs operations for as long as it stays
	// open: FromContext re-checks it so an expired token cannot keep
	// grabbing. A zero Expires counts as expired.
	Expires time.Time
}

// IsAdmin reports whether the caller has the admin role.
func (id Identity) IsAdmin() bool { return id.Role == RoleAdmin }

// expiredAt reports whether the token had expired at now, with the same
// leeway as verification. An identity without an expiry never came from a
// verified token, so it is not trusted either.
func (id Identity) expiredAt(now time.Time) bool {
	return id.Expires.IsZero() || !now.Before(id.Expires.Add(Leeway))
}

type claims struct {
	Role Role `json:"role"`
	jwt.RegisteredClaims
}

// Tokens verifies and issues HS256 tokens with one shared secret. Every
// token must expire, within MaxTTL of its issue: a leaked token, admin
// ones included, is then good for a bounded time only.
type Tokens struct {
	secret []byte
	maxTTL time.Duration
	parser *jwt.Parser
	// verified remembers tokens that passed the general parser (golang-jwt,
	// 4 us by reflection): in a flash sale the same users press "grab"
	// again and again. Tokens of the shape we issue take the fast path
	// (parseFast, 0.7 us) and are not cached: a lookup and an insertion
	// with eviction cost about as much, and 100,000 of them held 30 MB.
	// Expiry is checked on every hit; only successes are cached, so a bad
	// token costs a full check.
	verified *lru.Cache[string, Identity]
	now      func() time.Time
	// macs keeps HMAC-SHA256 states keyed with secret for the fast path.
	macs sync.Pool
}

// verifiedCacheSize bounds the cache (about 300 bytes a token).
const verifiedCacheSize = 100_000

// MaxTTLDefault is the longest lifetime a token may have unless
// configured otherwise (JWT_MAX_TTL): a working day and then some, so a
// shopper logs in once a day, while a stolen token expires within a day.
const MaxTTLDefault = 24 * time.Hour

// Option configures Tokens.
type Option func(*Tokens)

// WithMaxTTL sets the longest lifetime of a token (exp - iat, or exp - now
// when the token has no iat); zero or less keeps MaxTTLDefault.
func WithMaxTTL(d time.Duration) Option {
	return func(t *Tokens) {
		if d > 0 {
			t.maxTTL = d
		}
	}
}

// NewTokens returns a verifier/issuer for secret.
func NewTokens(secret string, opts ...Option) *Tokens {
	cache, _ := lru.New[string, Identity](verifiedCacheSize) // errors only for size <= 0
	t := &Tokens{secret: []byte(secret), maxTTL: MaxTTLDefault, verified: cache, now: time.Now}
	for _, o := range opts {
		o(t)
	}
	t.parser = jwt.NewParser(
		// Only HS256: this closes the "alg: none" and RS/HS confusion holes.
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		// A token without exp (or with "exp": null) would be good for ever.
		jwt.WithExpirationRequired(),
		// An iat in the future would let exp - iat hide a long lifetime.
		jwt.WithIssuedAt(),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(func() time.Time { return t.now() }),
	)
	return t
}

// MaxTTL is the longest lifetime Verify accepts and Issue signs.
func (t *Tokens) MaxTTL() time.Duration { return t.maxTTL }

// Leeway is how far past a token's exp (and before its iat and nbf) it is
// still accepted: room for the clocks of the issuer and of each node to
// disagree by a few seconds, as NTP-synced machines do, so that a token
// fresh from the issuer is not refused as not yet issued by a node whose
// clock runs behind. It lengthens every token's life by as much, which the
// operator's documentation states next to JWT_MAX_TTL.
const Leeway = 5 * time.Second

// Verify parses a token and returns the identity it carries. Any problem
// (bad signature, expired, wrong algorithm, malformed claims) is an
// UNAUTHENTICATED error whose message says what, never why in detail.
func (t *Tokens) Verify(token string) (Identity, error) {
	if id, err, ok := t.parseFast(token); ok {
		return id, err
	}
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

// ErrExpired is a token past its exp (and the leeway); shared by
// verification and the per-operation re-check, and told apart from other
// refusals by the websocket's close reason.
var ErrExpired = domain.Errorf(domain.CodeUnauthenticated, "token expired")

// errCritical refuses a token whose header has "crit": it names
// extensions the verifier must understand (RFC 7515 4.1.11), and this one
// understands none.
var errCritical = errors.New("crit header")

func (t *Tokens) parse(token string) (Identity, error) {
	var c claims
	_, err := t.parser.ParseWithClaims(token, &c, func(tok *jwt.Token) (any, error) {
		if _, ok := tok.Header["crit"]; ok {
			return nil, errCritical
		}
		return t.secret, nil
	})
	if err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return Identity{}, ErrExpired
		case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
			return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: exp is required")
		case errors.Is(err, errCritical):
			return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: unsupported crit header")
		}
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token")
	}
	// encoding/json keeps the last of repeated keys, so a token with two
	// role claims would be read as its last: whoever made such a token
	// meant something the reader cannot know, so it is refused.
	if repeatedKey(token) {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: a claim appears twice")
	}
	// The parser has checked exp is present and iat, if present, not in
	// the future.
	var iat *time.Time
	if c.IssuedAt != nil {
		iat = &c.IssuedAt.Time
	}
	return t.identity(c.ExpiresAt.Time, iat, c.Subject, c.Role)
}

// identity applies the service's own rules to a verified token's claims
// (both parsers): a lifetime within MaxTTL, a positive user id, a role of
// the contract.
func (t *Tokens) identity(exp time.Time, iat *time.Time, sub string, role Role) (Identity, error) {
	from := t.now()
	if iat != nil {
		from = *iat
	}
	if exp.Sub(from) > t.maxTTL {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: lifetime over %s", t.maxTTL)
	}
	uid, err := strconv.ParseInt(sub, 10, 64)
	if err != nil || uid <= 0 || !canonicalDecimal(sub) {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: sub must be a positive user id")
	}
	if role != RoleUser && role != RoleAdmin {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: role must be user or admin")
	}
	return Identity{UserID: uid, Role: role, Expires: exp}, nil
}

// canonicalDecimal reports digits without sign or leading zero: a user
// id has one spelling, so "+7" and "007" are not user 7.
func canonicalDecimal(s string) bool {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// repeatedKey reports a header or claims object of token (verified
// already, so well formed) in which a key appears twice, at its top
// level.
func repeatedKey(token string) bool {
	head, rest, _ := strings.Cut(token, ".")
	payload, _, _ := strings.Cut(rest, ".")
	for _, seg := range []string{head, payload} {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(seg, "="))
		if err != nil {
			return true // the parser accepted it: refuse what we cannot read
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return true
		}
		seen := map[string]bool{}
		for dec.More() {
			t, err := dec.Token()
			key, ok := t.(string)
			if err != nil || !ok || seen[key] {
				return true
			}
			seen[key] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return true
			}
		}
	}
	return false
}

// Issue signs a token for id that expires after ttl, which must be within
// MaxTTL: a longer token would be refused by every verifier.
func (t *Tokens) Issue(id Identity, ttl time.Duration) (string, error) {
	if ttl > t.maxTTL {
		return "", fmt.Errorf("sign token: lifetime %s is over the maximum %s (JWT_MAX_TTL)", ttl, t.maxTTL)
	}
	// Claims hold whole seconds: truncating both ends keeps exp - iat
	// within ttl.
	now := t.now().Truncate(time.Second)
	c := claims{
		Role: id.Role,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   strconv.FormatInt(id.UserID, 10),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl).Truncate(time.Second)),
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
		return Identity{}, ErrExpired
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

// WithHeader verifies an Authorization header's token and returns ctx
// carrying the identity or the verification error, as Middleware does for
// a request (FromContext reads it).
func (t *Tokens) WithHeader(ctx context.Context, header string) context.Context {
	id, err := t.VerifyHeader(header)
	return WithIdentity(ctx, id, err)
}

// Middleware authenticates each HTTP request's Authorization header and
// stores the outcome in its context. It rejects nothing itself: which
// operations need which role is the GraphQL layer's decision, and a
// websocket upgrade authenticates in its connection_init instead.
func (t *Tokens) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			r = r.WithContext(t.WithHeader(r.Context(), h))
		}
		next.ServeHTTP(w, r)
	})
}

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
