package auth

import (
	"testing"
	"time"

	"flashsale/domain"
)

// fuzzSecret signs the committed seeds (testdata/fuzz/FuzzVerifyHeader),
// and fuzzClock is the verifier's "now", so that the seeds that were valid
// when written stay valid and reach the claim checks.
const fuzzSecret = "fuzz-secret"

var fuzzClock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// FuzzVerifyHeader feeds Authorization header values to the verifier: it
// must never panic, must refuse with UNAUTHENTICATED and nothing else, and
// what it accepts must be a usable identity (a positive user id, a role of
// the contract). `go test` runs the committed seeds; `make fuzz` explores.
func FuzzVerifyHeader(f *testing.F) {
	tokens := NewTokens(fuzzSecret)
	tokens.now = func() time.Time { return fuzzClock }
	for _, id := range []Identity{{UserID: 42, Role: RoleUser}, {UserID: 1, Role: RoleAdmin}} {
		tok, err := tokens.Issue(id, time.Hour)
		if err != nil {
			f.Fatal(err)
		}
		f.Add("Bearer " + tok)
	}
	f.Fuzz(func(t *testing.T, header string) {
		id, err := tokens.VerifyHeader(header)
		if err != nil {
			if code := domain.ErrorCode(err); code != domain.CodeUnauthenticated {
				t.Fatalf("refused with code %s (%v), want %s", code, err, domain.CodeUnauthenticated)
			}
			return
		}
		if id.UserID <= 0 || (id.Role != RoleUser && id.Role != RoleAdmin) {
			t.Fatalf("accepted an unusable identity %+v", id)
		}
	})
}
