package auth

import (
	"testing"
	"time"
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
	clock = clock.Add(time.Minute + tokenLeeway + time.Second)
	if _, err := tokens.Verify(tok); err == nil {
		t.Fatal("an expired token passed because it was cached")
	}
	if _, err := NewTokens("other").Verify(tok); err == nil {
		t.Fatal("a token passed under another secret")
	}
}
