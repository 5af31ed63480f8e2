package persistence_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/internal/testenv"
	"flashsale/persistence"
)

func TestReadRedisDurability(t *testing.T) {
	t.Parallel()
	t.Run("nothing kept", func(t *testing.T) {
		d, err := persistence.ReadRedisDurability(t.Context(), testenv.MustRedis(t).Client())
		if err != nil || d.Persistent() {
			t.Fatalf("%+v %v, want not persistent", d, err)
		}
	})
	t.Run("append-only file", func(t *testing.T) {
		d, err := persistence.ReadRedisDurability(t.Context(), testenv.MustDurableRedis(t).Client())
		if err != nil || !d.AppendOnly || !d.Persistent() {
			t.Fatalf("%+v %v, want appendonly", d, err)
		}
	})
	t.Run("snapshots only", func(t *testing.T) {
		c := testenv.MustRedis(t).Client()
		if err := c.ConfigSet(t.Context(), "save", "900 1").Err(); err != nil {
			t.Fatal(err)
		}
		d, err := persistence.ReadRedisDurability(t.Context(), c)
		if err != nil || d.AppendOnly || !d.Persistent() {
			t.Fatalf("%+v %v, want RDB snapshots", d, err)
		}
	})
	t.Run("CONFIG unavailable", func(t *testing.T) {
		m := miniredis.RunT(t) // has no CONFIG command, like many managed Redis services
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		if d, err := persistence.ReadRedisDurability(t.Context(), c); err == nil {
			t.Fatalf("%+v without error", d)
		}
	})
}
