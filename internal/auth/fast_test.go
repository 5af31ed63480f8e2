package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"testing"
	"time"
)

// signClaims makes a token with the fast path's header and the given claims
// JSON, signed with secret.
func signClaims(claims, secret string) string {
	unsigned := fastHeader + "." + base64.RawURLEncoding.EncodeToString([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(unsigned))
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// The fast path and golang-jwt's parser give every token the same answer:
// the same identity, or the same error message. Seeds cover every claim
// and check; `make fuzz` explores further.
func FuzzFastPathAgreesWithTheParser(f *testing.F) {
	now := fuzzClock.Unix()
	ts := func(d int64) string { return strconv.FormatInt(now+d, 10) }
	for _, c := range []string{
		`{"role":"user","sub":"42","exp":` + ts(3600) + `,"iat":` + ts(0) + `}`,
		`{"role":"admin","sub":"1","exp":` + ts(60) + `}`,
		`{"role":"user","sub":"42","exp":` + ts(-10) + `,"iat":` + ts(-100) + `}`, // expired
		`{"role":"user","sub":"42","exp":` + ts(-3) + `}`,                         // within the leeway
		`{"role":"user","sub":"42","iat":` + ts(0) + `}`,                          // no exp
		`{"role":"user","sub":"42","exp":` + ts(90000) + `,"iat":` + ts(0) + `}`,  // over the max TTL
		`{"role":"user","sub":"42","exp":` + ts(600) + `,"iat":` + ts(60) + `}`,   // iat in the future
		`{"role":"user","sub":"42","exp":` + ts(600) + `,"nbf":` + ts(60) + `}`,   // not valid yet
		`{"role":"user","sub":"-4","exp":` + ts(600) + `}`,
		`{"role":"user","sub":"+4","exp":` + ts(600) + `}`,
		`{"role":"root","sub":"4","exp":` + ts(600) + `}`,
		`{"role":"user","sub":"4","exp":` + ts(600) + `,"iss":"x","jti":"y"}`,
		`{"role":"user","sub":"4","sub":"5","exp":` + ts(600) + `}`,
		`{"role":"user","sub":4,"exp":` + ts(600) + `}`,
		`{"role":"user","sub":"4","exp":` + ts(600) + `.5}`,
		`{"ROLE":"admin","sub":"4","exp":` + ts(600) + `}`,
		`{"role":"us\u0065r","sub":"4","exp":` + ts(600) + `}`,
		`{"role":"user","sub":"4","exp":` + ts(600) + `,"aud":["a"]}`,
		` { "role" : "user" , "sub" : "4" , "exp" : ` + ts(600) + ` } `,
		`{}`, `[]`, `null`, `{"exp":}`,
	} {
		f.Add(c, true)
		f.Add(c, false)
	}
	f.Fuzz(func(t *testing.T, claims string, goodKey bool) {
		tokens := NewTokens(fuzzSecret)
		tokens.now = func() time.Time { return fuzzClock }
		key := fuzzSecret
		if !goodKey {
			key = "another-secret"
		}
		token := signClaims(claims, key)
		fast, fastErr, ok := tokens.parseFast(token)
		if !ok {
			return // the general parser decides it alone
		}
		slow, slowErr := tokens.parse(token)
		if (fastErr == nil) != (slowErr == nil) || (fastErr != nil && fastErr.Error() != slowErr.Error()) || fast != slow {
			t.Fatalf("claims %s (good key %v):\n fast %+v %v\n slow %+v %v", claims, goodKey, fast, fastErr, slow, slowErr)
		}
	})
}

// Every token Issue signs takes the fast path: otherwise it would only be
// dead code agreeing with the parser.
func TestIssuedTokensTakeTheFastPath(t *testing.T) {
	tokens := NewTokens("fast-secret")
	for _, id := range []Identity{{UserID: 42, Role: RoleUser}, {UserID: 1, Role: RoleAdmin}, {UserID: 1 << 50, Role: RoleUser}} {
		tok, err := tokens.Issue(id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got, err, ok := tokens.parseFast(tok)
		if !ok || err != nil || got.UserID != id.UserID || got.Role != id.Role {
			t.Fatalf("%+v: fast path %v %v %+v", id, ok, err, got)
		}
	}
}

// BenchmarkVerifyNewUser is a grab from a user not seen before (the
// verified-token cache misses): the fast path against golang-jwt's.
func BenchmarkVerifyNewUser(b *testing.B) {
	tokens := NewTokens("bench-secret")
	toks := make([]string, 4096)
	for i := range toks {
		toks[i], _ = tokens.Issue(Identity{UserID: int64(i + 1), Role: RoleUser}, time.Hour)
	}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err, ok := tokens.parseFast(toks[i%len(toks)]); !ok || err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("golang-jwt", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := tokens.parse(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
