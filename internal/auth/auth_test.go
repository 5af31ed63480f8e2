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

func TestIdentityInContextExpires(t *testing.T) {
	cases := []struct {
		name    string
		expires time.Time
		ok      bool
	}{
		{"no exp claim", time.Time{}, true},
		{"valid", time.Now().Add(time.Minute), true},
		{"within the leeway", time.Now().Add(-tokenLeeway / 2), true},
		{"expired since it was verified", time.Now().Add(-tokenLeeway - time.Second), false},
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
