package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"flashsale/domain"
)

func TestVerifiedTokensStillExpire(t *testing.T) {
	clock := time.Now()
	tokens := NewTokens("s3cret")
	tokens.now = func() time.Time { return clock }
	tok, err := tokens.Issue(Identity{UserID: 9, Role: RoleUser}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second time from the cache
		if id, err := tokens.Verify(tok); err != nil || id.UserID != 9 || id.Role != RoleUser {
			t.Fatalf("verify %d: %+v %v", i, id, err)
		}
	}
	clock = clock.Add(time.Minute + Leeway + time.Second)
	if _, err := tokens.Verify(tok); err == nil {
		t.Fatal("an expired token passed because it was cached")
	}
	if _, err := NewTokens("other").Verify(tok); err == nil {
		t.Fatal("a token passed under another secret")
	}
}

func TestIdentityInContextExpires(t *testing.T) {
	cases := []struct {
		name    string
		expires time.Time
		ok      bool
	}{
		{"no expiry: not from a verified token", time.Time{}, false},
		{"valid", time.Now().Add(time.Minute), true},
		{"within the leeway", time.Now().Add(-Leeway / 2), true},
		{"expired since it was verified", time.Now().Add(-Leeway - time.Second), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := WithIdentity(t.Context(), Identity{UserID: 3, Role: RoleUser, Expires: tc.expires}, nil)
			_, err := FromContext(ctx)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// sign makes a token with exactly the given header fields and claims, as
// an attacker or a careless issuer could.
func sign(t *testing.T, secret string, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenRules(t *testing.T) {
	const secret = "s3cret"
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "7", "role": "admin"}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	cases := []struct {
		name   string
		header map[string]any
		claims jwt.MapClaims
		ok     bool
	}{
		{"exp and iat within the maximum", nil, claims(jwt.MapClaims{"iat": at(0), "exp": at(time.Hour)}), true},
		{"lifetime exactly the maximum", nil, claims(jwt.MapClaims{"iat": at(-time.Hour), "exp": at(MaxTTLDefault - time.Hour)}), true},
		{"exp without iat, within the maximum from now", nil, claims(jwt.MapClaims{"exp": at(time.Hour)}), true},
		{"no exp", nil, claims(nil), false},
		{"no exp, with iat", nil, claims(jwt.MapClaims{"iat": at(0)}), false},
		{"exp null", nil, claims(jwt.MapClaims{"exp": nil}), false},
		{"exp a string", nil, claims(jwt.MapClaims{"exp": "tomorrow"}), false},
		{"lifetime over the maximum", nil, claims(jwt.MapClaims{"iat": at(0), "exp": at(MaxTTLDefault + time.Minute)}), false},
		{"issued long ago, lifetime over the maximum, not yet expired", nil, claims(jwt.MapClaims{"iat": at(-30 * 24 * time.Hour), "exp": at(time.Hour)}), false},
		{"no iat, exp beyond the maximum from now", nil, claims(jwt.MapClaims{"exp": at(10 * 365 * 24 * time.Hour)}), false},
		{"iat in the future hides a long lifetime", nil, claims(jwt.MapClaims{"iat": at(300 * 24 * time.Hour), "exp": at(300*24*time.Hour + time.Hour)}), false},
		{"crit names an unknown extension", map[string]any{"crit": []string{"exp"}}, claims(jwt.MapClaims{"iat": at(0), "exp": at(time.Hour), "exp2": 1}), false},
		{"crit empty", map[string]any{"crit": []string{}}, claims(jwt.MapClaims{"iat": at(0), "exp": at(time.Hour)}), false},
		{"crit not a list", map[string]any{"crit": "b64"}, claims(jwt.MapClaims{"iat": at(0), "exp": at(time.Hour)}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tokens := NewTokens(secret)
			tok := sign(t, secret, tc.header, tc.claims)
			for i := range 2 { // the second time through the cache
				id, err := tokens.Verify(tok)
				if !tc.ok {
					if err == nil {
						t.Fatalf("verify %d: accepted as %+v", i, id)
					}
					var de *domain.Error
					if !errors.As(err, &de) || de.Code != domain.CodeUnauthenticated {
						t.Fatalf("verify %d: %v, want UNAUTHENTICATED", i, err)
					}
					continue
				}
				if err != nil || id.UserID != 7 || id.Expires.IsZero() {
					t.Fatalf("verify %d: %+v %v", i, id, err)
				}
			}
		})
	}
}

func TestMaxTTLIsConfigurable(t *testing.T) {
	tokens := NewTokens("s3cret", WithMaxTTL(time.Hour))
	if _, err := tokens.Issue(Identity{UserID: 1, Role: RoleUser}, 2*time.Hour); err == nil {
		t.Fatal("issued a token over the maximum lifetime")
	}
	tok, err := tokens.Issue(Identity{UserID: 1, Role: RoleUser}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Verify(tok); err != nil {
		t.Fatalf("a token of exactly the maximum lifetime: %v", err)
	}
	long, err := NewTokens("s3cret").Issue(Identity{UserID: 1, Role: RoleUser}, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Verify(long); err == nil {
		t.Fatal("a 2h token passed a 1h maximum")
	}
}

// signRaw makes a token of exactly this header and payload JSON, which
// no JSON encoder of claims would write (repeated keys, odd spellings).
func signRaw(secret, header, payload string) string {
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// A token must say one thing: a claim given twice (the JSON decoder
// would keep the last role) and a user id in any spelling but its
// canonical decimal are refused, on the fast path and the general one
// alike (the issued header takes the fast path, another the general).
func TestTokensWithAmbiguousClaimsAreRefused(t *testing.T) {
	const secret = "s3cret"
	exp := time.Now().Add(time.Hour).Unix()
	headers := map[string]string{"fast": `{"alg":"HS256","typ":"JWT"}`, "general": `{"typ":"JWT","alg":"HS256"}`}
	for _, tc := range []struct {
		name, payload string
		ok            bool
	}{
		{"canonical", fmt.Sprintf(`{"sub":"7","role":"user","exp":%d}`, exp), true},
		{"role twice", fmt.Sprintf(`{"sub":"7","role":"user","role":"admin","exp":%d}`, exp), false},
		{"sub twice", fmt.Sprintf(`{"sub":"7","sub":"8","role":"user","exp":%d}`, exp), false},
		{"exp twice", fmt.Sprintf(`{"sub":"7","role":"user","exp":%d,"exp":%d}`, exp, exp), false},
		{"sub with a plus sign", fmt.Sprintf(`{"sub":"+7","role":"user","exp":%d}`, exp), false},
		{"sub with leading zeros", fmt.Sprintf(`{"sub":"007","role":"user","exp":%d}`, exp), false},
		{"sub with a space", fmt.Sprintf(`{"sub":" 7","role":"user","exp":%d}`, exp), false},
	} {
		for path, header := range headers {
			t.Run(tc.name+", "+path, func(t *testing.T) {
				tokens := NewTokens(secret)
				tok := signRaw(secret, header, tc.payload)
				for i := range 2 { // the second time through the cache
					id, err := tokens.Verify(tok)
					switch {
					case tc.ok && (err != nil || id.UserID != 7):
						t.Fatalf("verify %d: %+v %v", i, id, err)
					case !tc.ok && err == nil:
						t.Fatalf("verify %d: accepted as %+v", i, id)
					}
				}
			})
		}
	}
}

// The leeway is Leeway, no more, on both verification paths: the fast
// path (tokens of the shape Issue makes) and golang-jwt's (any other
// shape, here an escaped role), and for a token from the verified cache.
func TestTokensAreAcceptedUpToTheLeewayPastExp(t *testing.T) {
	const secret = "leeway-test-secret-0123456789abcdef"
	clock := time.Unix(1_800_000_000, 0)
	ts := func(d time.Duration) string { return strconv.FormatInt(clock.Add(d).Unix(), 10) }
	shapes := map[string]func(exp, iat time.Duration) string{
		"fast path": func(exp, iat time.Duration) string {
			return signClaims(`{"role":"user","sub":"7","exp":`+ts(exp)+`,"iat":`+ts(iat)+`}`, secret)
		},
		"general parser": func(exp, iat time.Duration) string {
			return signClaims(`{"role":"us\u0065r","sub":"7","exp":`+ts(exp)+`,"iat":`+ts(iat)+`}`, secret)
		},
	}
	cases := []struct {
		name     string
		exp, iat time.Duration // from now
		ok       bool
	}{
		{"valid", time.Minute, -time.Minute, true},
		{"expired a second less than the leeway ago", -Leeway + time.Second, -time.Hour, true},
		{"expired the leeway ago", -Leeway, -time.Hour, false},
		{"issued a second less than the leeway ahead", time.Hour, Leeway - time.Second, true},
		{"issued more than the leeway ahead", time.Hour, Leeway + time.Second, false},
	}
	for shape, sign := range shapes {
		for _, tc := range cases {
			t.Run(shape+"/"+tc.name, func(t *testing.T) {
				tokens := NewTokens(secret)
				tokens.now = func() time.Time { return clock }
				tok := sign(tc.exp, tc.iat)
				for i := 0; i < 2; i++ { // the second time from the cache, if cached
					if _, err := tokens.Verify(tok); (err == nil) != tc.ok {
						t.Fatalf("verify %d: err %v, want ok=%v", i, err, tc.ok)
					}
				}
			})
		}
	}
}
