package config

import (
	"slices"
	"strings"
	"testing"
)

// CORS_ALLOWED_ORIGINS: none by default with real stores, local dev
// servers on any port when embedded, and "none" turns that off (httpapi
// checks the patterns: see the owners' test).
func TestCORSOriginsPerMode(t *testing.T) {
	real := map[string]string{"DATABASE_URL": "postgres://u@h:5432/d", "REDIS_URL": "redis://127.0.0.1:6379/0", "JWT_SECRET": strings.Repeat("s", 32)}
	with := func(base map[string]string, v string) map[string]string {
		env := map[string]string{"CORS_ALLOWED_ORIGINS": v}
		for k, val := range base {
			env[k] = val
		}
		return env
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"embedded", nil, []string{"http://localhost:*", "http://127.0.0.1:*"}},
		{"real stores", real, nil},
		{"real stores, listed", with(real, " https://shop.example.com , http://localhost:*"), []string{"https://shop.example.com", "http://localhost:*"}},
		{"real stores, any", with(real, "*"), []string{"*"}},
		{"embedded, none", with(nil, "none"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if err != nil || !slices.Equal(c.CORSOrigins(), tc.want) {
				t.Fatalf("origins %q (%v), want %q", c.CORSOrigins(), err, tc.want)
			}
		})
	}
}
