package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"strings"
	"time"

	"flashsale/domain"
)

// The fast path verifies the tokens this service issues without
// golang-jwt's reflection: a fixed header, and claims that are a flat JSON
// object of plain strings and integers, read by a small scanner. Anything
// else (another header, a float, an escape, an array, a key we do not
// know, a repeated key) is left to the general parser, so the fast path
// never decides a token the general one would decide differently; a fuzz
// target (FuzzFastPathAgreesWithTheParser) holds the two to the same
// answers. In a flash sale most grabs come from users seen for the first
// time, whom the verified-token cache cannot help.

// fastHeader is the header segment of every token Issue signs:
// {"alg":"HS256","typ":"JWT"}.
var fastHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// fastClaims are the claims the fast path reads; the others it allows
// (iss, jti) are strings it skips.
type fastClaims struct {
	sub, role      string
	exp, iat, nbf  int64
	hasIat, hasNbf bool
	hasExp, hasSub bool
}

// parseFast verifies token when it has the shape above. ok is false when
// it has not: then the general parser decides.
func (t *Tokens) parseFast(token string) (id Identity, err error, ok bool) {
	head, rest, found := strings.Cut(token, ".")
	if !found || head != fastHeader {
		return Identity{}, nil, false
	}
	payload, sig, found := strings.Cut(rest, ".")
	if !found || len(sig) != 43 || len(payload) > 1024 {
		return Identity{}, nil, false
	}
	var raw [768]byte
	n, derr := base64.RawURLEncoding.Strict().Decode(raw[:], []byte(payload))
	if derr != nil {
		return Identity{}, nil, false
	}
	var c fastClaims
	if !scanClaims(raw[:n], &c) {
		return Identity{}, nil, false
	}
	var got [32]byte
	if m, err := base64.RawURLEncoding.Strict().Decode(got[:], []byte(sig)); err != nil || m != 32 {
		return Identity{}, nil, false
	}
	mac, _ := t.macs.Get().(hash.Hash)
	if mac == nil {
		mac = hmac.New(sha256.New, t.secret)
	}
	mac.Reset()
	mac.Write([]byte(token[:len(head)+1+len(payload)]))
	var want [32]byte
	sum := mac.Sum(want[:0])
	t.macs.Put(mac)
	if !hmac.Equal(sum, got[:]) {
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token"), true
	}
	now := t.now()
	switch {
	case !c.hasExp:
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token: exp is required"), true
	case !now.Before(time.Unix(c.exp, 0).Add(Leeway)):
		return Identity{}, ErrExpired, true
	case c.hasIat && now.Add(Leeway).Before(time.Unix(c.iat, 0)):
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token"), true
	case c.hasNbf && now.Add(Leeway).Before(time.Unix(c.nbf, 0)):
		return Identity{}, domain.Errorf(domain.CodeUnauthenticated, "invalid token"), true
	}
	var iat *time.Time
	if c.hasIat {
		at := time.Unix(c.iat, 0)
		iat = &at
	}
	id, err = t.identity(time.Unix(c.exp, 0), iat, c.sub, Role(c.role))
	return id, err, true
}

// scanClaims reads a flat JSON object whose values are plain strings (no
// escapes) or non-negative integers, into c. It returns false for
// anything else, and for a key it does not know or sees twice.
func scanClaims(b []byte, c *fastClaims) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	seen := 0
	for {
		key, j, ok := scanString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		var bit int
		switch key {
		case "sub", "role", "iss", "jti":
			s, j, ok := scanString(b, i)
			if !ok {
				return false
			}
			i = j
			switch key {
			case "sub":
				bit, c.sub, c.hasSub = 1, s, true
			case "role":
				bit, c.role = 2, s
			case "iss":
				bit = 4
			case "jti":
				bit = 8
			}
		case "exp", "iat", "nbf":
			v, j, ok := scanInt(b, i)
			if !ok {
				return false
			}
			i = j
			switch key {
			case "exp":
				bit, c.exp, c.hasExp = 16, v, true
			case "iat":
				bit, c.iat, c.hasIat = 32, v, true
			case "nbf":
				bit, c.nbf, c.hasNbf = 64, v, true
			}
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads a JSON string of printable ASCII without escapes.
func scanString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", j, false
		}
	}
	return "", len(b), false
}

// scanInt reads a JSON integer of at most 12 digits, no sign, no leading
// zero (what Issue writes for a time in seconds).
func scanInt(b []byte, i int) (int64, int, bool) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i || j-i > 12 || (b[i] == '0' && j-i > 1) {
		return 0, j, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, j, false
	}
	v, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	return v, j, err == nil
}
