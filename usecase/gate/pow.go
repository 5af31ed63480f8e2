package gate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"flashsale/domain"
)

// A proof-of-work challenge is printable text:
//
//	pow1.<voucher>.<user>.<difficulty>.<expiry unix ms>.<16 random hex>.<32 hex of HMAC-SHA256 of what precedes>
//
// The server keeps nothing until it is solved: the challenge carries what
// it is for, signed. Solving it means finding a nonce (any printable text,
// e.g. decimal digits) such that SHA-256(challenge + nonce) starts with
// difficulty zero bits.
const (
	powPrefix       = "pow1."
	maxChallengeLen = 160
	// MaxNonceLen bounds a nonce: decimal digits of a 64-bit counter need 20.
	MaxNonceLen = 64
	// MaxDifficulty keeps a challenge solvable (2^32 hashes is minutes).
	MaxDifficulty = 32
)

// Challenges issues and verifies proof-of-work challenges.
type Challenges struct {
	tickets *Tickets // the same keyed HMAC, over a distinct text
	// sum is SHA-256; a test counts its calls.
	sum func([]byte) [sha256.Size]byte
}

// NewChallenges returns challenges signed with the tickets' key.
func NewChallenges(tickets *Tickets) *Challenges {
	return &Challenges{tickets: tickets, sum: sha256.Sum256}
}

// Issue returns a challenge for user and voucher.
func (c *Challenges) Issue(user, voucher int64, difficulty int, expires time.Time) string {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	body := powPrefix + strconv.FormatInt(voucher, 10) + "." + strconv.FormatInt(user, 10) + "." +
		strconv.Itoa(difficulty) + "." + strconv.FormatInt(expires.UnixMilli(), 10) + "." + hex.EncodeToString(nonce[:])
	var mac [sha256.Size]byte
	c.tickets.mac([]byte(body), &mac)
	return body + "." + hex.EncodeToString(mac[:16])
}

// parsed is a challenge's signed fields.
type parsed struct {
	voucher, user int64
	difficulty    int
	expires       time.Time
	body, mac     string
}

var errMalformed = errors.New("malformed challenge")

func parseChallenge(s string) (parsed, error) {
	if len(s) > maxChallengeLen || !strings.HasPrefix(s, powPrefix) {
		return parsed{}, errMalformed
	}
	f := strings.Split(s[len(powPrefix):], ".")
	if len(f) != 6 {
		return parsed{}, errMalformed
	}
	var p parsed
	var err error
	var ms int64
	if p.voucher, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return parsed{}, errMalformed
	}
	if p.user, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return parsed{}, errMalformed
	}
	if p.difficulty, err = strconv.Atoi(f[2]); err != nil || p.difficulty < 0 || p.difficulty > MaxDifficulty {
		return parsed{}, errMalformed
	}
	if ms, err = strconv.ParseInt(f[3], 10, 64); err != nil {
		return parsed{}, errMalformed
	}
	p.expires = time.UnixMilli(ms)
	p.mac = f[5]
	p.body = s[:len(s)-len(p.mac)-1]
	return p, nil
}

// Difficulty returns the difficulty a challenge asks for, or an error for
// text that is no challenge.
func Difficulty(challenge string) (int, error) {
	p, err := parseChallenge(challenge)
	return p.difficulty, err
}

// LeadingZeroBits counts the zero bits at the start of sum.
func LeadingZeroBits(sum [sha256.Size]byte) int {
	n := 0
	for _, b := range sum {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// Verify checks a solution for user and voucher at now and returns the
// challenge's expiry and its digest (the key of its single-use mark).
// A wrong nonce is refused after one SHA-256, before the signature is
// checked: a flood of guesses costs the server one hash each.
func (c *Challenges) Verify(challenge, nonce string, user, voucher int64, now time.Time) (time.Time, string, error) {
	p, err := parseChallenge(challenge)
	if err != nil || len(nonce) == 0 || len(nonce) > MaxNonceLen || !printable(nonce) {
		return time.Time{}, "", domain.ErrChallengeWrong
	}
	if LeadingZeroBits(c.sum([]byte(challenge+nonce))) < p.difficulty {
		return time.Time{}, "", domain.ErrChallengeWrong
	}
	var mac [sha256.Size]byte
	c.tickets.mac([]byte(p.body), &mac)
	want := hex.EncodeToString(mac[:16])
	if !hmac.Equal([]byte(want), []byte(p.mac)) || p.user != user || p.voucher != voucher || !now.Before(p.expires) {
		return time.Time{}, "", domain.ErrChallengeWrong
	}
	return p.expires, p.mac, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Solves reports whether nonce solves challenge at its own difficulty.
func Solves(challenge, nonce string) bool {
	d, err := Difficulty(challenge)
	return err == nil && LeadingZeroBits(sha256.Sum256([]byte(challenge+nonce))) >= d
}

// Solve finds the smallest decimal nonce that solves challenge with
// difficulty leading zero bits (the challenge's own when difficulty < 0).
// It is the client's side, for the `solve` command, tests and tools.
func Solve(challenge string, difficulty int) (string, error) {
	if difficulty < 0 {
		d, err := Difficulty(challenge)
		if err != nil {
			return "", err
		}
		difficulty = d
	}
	if difficulty > MaxDifficulty {
		return "", errors.New("difficulty above 32 bits")
	}
	buf := []byte(challenge)
	base := len(buf)
	for n := uint64(0); ; n++ {
		buf = strconv.AppendUint(buf[:base], n, 10)
		if LeadingZeroBits(sha256.Sum256(buf)) >= difficulty {
			return string(buf[base:]), nil
		}
	}
}
