package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"flashsale/internal/auth"
)

func TestTokenCommandMintsWithinTheMaximumLifetime(t *testing.T) {
	t.Parallel()
	mint := func(t *testing.T, env map[string]string, args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := run(t.Context(), append([]string{"token", "--user", "42"}, args...), func(k string) string { return env[k] }, &out, io.Discard)
		return strings.TrimSpace(out.String()), err
	}
	secret := map[string]string{"JWT_SECRET": "cmd-secret"}

	t.Run("the default lifetime is accepted by the default verifier", func(t *testing.T) {
		tok, err := mint(t, secret)
		if err != nil {
			t.Fatal(err)
		}
		id, err := auth.NewTokens("cmd-secret").Verify(tok)
		if err != nil || id.UserID != 42 {
			t.Fatalf("%+v %v", id, err)
		}
		if left := time.Until(id.Expires); left > auth.MaxTTLDefault || left < auth.MaxTTLDefault-time.Minute {
			t.Fatalf("expires in %s, want about %s", left, auth.MaxTTLDefault)
		}
	})
	t.Run("a longer --ttl is refused", func(t *testing.T) {
		if tok, err := mint(t, secret, "--ttl", "168h"); err == nil || !strings.Contains(err.Error(), "JWT_MAX_TTL") {
			t.Fatalf("minted %q, err %v", tok, err)
		}
	})
	t.Run("JWT_MAX_TTL bounds the default and --ttl", func(t *testing.T) {
		env := map[string]string{"JWT_SECRET": "cmd-secret", "JWT_MAX_TTL": "1h"}
		tok, err := mint(t, env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := auth.NewTokens("cmd-secret", auth.WithMaxTTL(time.Hour)).Verify(tok); err != nil {
			t.Fatalf("the minted token fails its own maximum: %v", err)
		}
		if _, err := mint(t, env, "--ttl", "2h"); err == nil {
			t.Fatal("minted over JWT_MAX_TTL")
		}
		if _, err := mint(t, map[string]string{"JWT_SECRET": "cmd-secret", "JWT_MAX_TTL": "soon"}); err == nil || !strings.Contains(err.Error(), "JWT_MAX_TTL") {
			t.Fatalf("a bad JWT_MAX_TTL: %v", err)
		}
	})
}

func TestTokenCommand(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	env := map[string]string{"JWT_SECRET": "cmd-secret"}
	if err := run(t.Context(), []string{"token", "--user", "42", "--role", "admin"}, func(k string) string { return env[k] }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	id, err := auth.NewTokens("cmd-secret").Verify(strings.TrimSpace(out.String()))
	if err != nil || id.UserID != 42 || !id.IsAdmin() {
		t.Fatalf("token %q: %+v %v", out.String(), id, err)
	}
	realMode := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/x"}
	if err := run(t.Context(), []string{"token", "--user", "42"}, func(k string) string { return realMode[k] }, io.Discard, io.Discard); err == nil {
		t.Fatal("token without a secret succeeded in real mode")
	}
	var usage bytes.Buffer
	_ = run(t.Context(), []string{"token", "-h"}, func(k string) string { return env[k] }, io.Discard, &usage)
	if !strings.Contains(usage.String(), "jwt-secret") || strings.Contains(usage.String(), "cmd-secret") {
		t.Fatalf("token usage shows the secret or no flags:\n%s", usage.String())
	}
}

// A mistyped flag of a subcommand is one error, which main prints once:
// nothing of it on stderr before (the flag package printed it, then the
// whole usage).
func TestASubcommandsBadFlagIsOneError(t *testing.T) {
	t.Parallel()
	env := map[string]string{"JWT_SECRET": "cmd-secret"}
	for _, args := range [][]string{{"token", "--user", "abc"}, {"token", "--nope"}, {"solve", "--nope", "x"}} {
		var stderr bytes.Buffer
		err := run(t.Context(), args, func(k string) string { return env[k] }, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--help") {
			t.Fatalf("%v: %v, want an error pointing at --help", args, err)
		}
		if stderr.Len() > 0 {
			t.Fatalf("%v printed before main prints the error:\n%s", args, stderr.String())
		}
	}
}
