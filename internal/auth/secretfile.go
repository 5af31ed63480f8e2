package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// MinSecretBytes is the shortest HS256 secret the service accepts: as long
// as the SHA-256 output that keys the MAC. One token is enough to try
// secrets offline, so a short or guessable one lets anyone mint tokens,
// admin ones included.
const MinSecretBytes = 32

// SecretFromFile returns the HS256 secret kept in path, creating the file
// (mode 0600, 32 random bytes as hex) when it does not exist. The embedded
// mode keeps its secret this way, beside its SQLite file, so the tokens it
// printed still verify after a restart and the token command signs with
// the same secret. Two processes creating it at once agree: the file is
// created exclusively and the loser reads the winner's.
func SecretFromFile(path string) (string, error) {
	for range 2 {
		b, err := os.ReadFile(path)
		if err == nil {
			secret := strings.TrimSpace(string(b))
			if len(secret) < MinSecretBytes {
				return "", fmt.Errorf("secret file %s: want at least %d characters; delete it to make a new one (tokens signed with it stop working)", path, MinSecretBytes)
			}
			return secret, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("secret file: %w", err)
		}
		if err := createSecret(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create secret file: %w", err)
		}
	}
	return "", fmt.Errorf("secret file %s: created but cannot be read", path)
}

// createSecret writes a new random secret to path, which must not exist.
// A partly written file is removed, so a failed attempt leaves nothing
// that would later be read as a short secret.
func createSecret(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(hex.EncodeToString(b) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}
