package auth

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSecretFromFileIsCreatedOnceWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flashsale.secret")
	first, err := SecretFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 {
		t.Fatalf("secret %d characters, want 64 hex", len(first))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	again, err := SecretFromFile(path)
	if err != nil || again != first {
		t.Fatalf("second read %q (%v), want the first secret", again, err)
	}
}

func TestSecretFromFileRefusesAShortSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flashsale.secret")
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := SecretFromFile(path); err == nil {
		t.Fatal("a 5-character secret was accepted")
	}
}
