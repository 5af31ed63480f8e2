package persistence_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// ReadRedisDurability reads what a real server runs, and each setting
// falls in its row of the table.
func TestReadRedisDurability(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		durable  bool
		settings []string
		want     persistence.DurabilityRisk
	}{
		{"append-only, fsync always", true, nil, persistence.DurabilityAlways},
		{"append-only, fsync every second", true, []string{"appendfsync", "everysec"}, persistence.DurabilityEverysec},
		{"append-only, no fsync", true, []string{"appendfsync", "no"}, persistence.DurabilityNoFsync},
		{"append-only beside snapshots", true, []string{"save", "900 1"}, persistence.DurabilityAlways},
		{"snapshots only", false, []string{"save", "900 1"}, persistence.DurabilitySnapshots},
		{"nothing kept", false, nil, persistence.DurabilityNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := testenv.MustRedis(t)
			if tc.durable {
				s = testenv.MustDurableRedis(t)
			}
			c := s.Client()
			for i := 0; i < len(tc.settings); i += 2 {
				if err := c.ConfigSet(t.Context(), tc.settings[i], tc.settings[i+1]).Err(); err != nil {
					t.Fatal(err)
				}
			}
			d, err := persistence.ReadRedisDurability(t.Context(), c)
			if err != nil || d.Risk() != tc.want {
				t.Fatalf("%+v (%v) falls in %q, want %q", d, err, d.Risk().Setting, tc.want.Setting)
			}
		})
	}
	t.Run("CONFIG unavailable", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t) // has no CONFIG command, like many managed Redis services
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		if d, err := persistence.ReadRedisDurability(t.Context(), c); err == nil {
			t.Fatalf("%+v without error", d)
		}
	})
}

// The operators' documentation shows the table the start-up line speaks
// from, word for word: docs/OPERATIONS.md (real Redis and Postgres) and
// docs/RELIABILITY.md each have a row "| setting | what a crash can do |"
// for every row of persistence.DurabilityTable (code spans aside).
func TestTheDocsShowTheDurabilityTable(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{filepath.Join("docs", "OPERATIONS.md"), filepath.Join("docs", "RELIABILITY.md")} {
		b, err := os.ReadFile(filepath.Join("..", doc))
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]string{}
		for _, line := range strings.Split(strings.ReplaceAll(string(b), "`", ""), "\n") {
			cells := strings.Split(line, "|")
			if strings.HasPrefix(line, "|") && len(cells) == 4 {
				rows[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[2])
			}
		}
		for _, r := range persistence.DurabilityTable {
			if got, ok := rows[r.Setting]; !ok || got != r.Crash {
				t.Errorf("%s: the row of %q says %q, want:\n| %s | %s |", doc, r.Setting, got, r.Setting, r.Crash)
			}
		}
	}
}
