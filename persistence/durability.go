package persistence

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisDurability is how a Redis server keeps its data across a restart,
// as its CONFIG says. Orders the service has answered OK wait in Redis's
// order log until they are in the database, so a Redis that keeps nothing
// loses them when it restarts.
type RedisDurability struct {
	AppendOnly bool   // appendonly yes
	Save       string // RDB snapshot rules ("" = none)
}

// Persistent reports whether the server keeps anything across a restart.
func (d RedisDurability) Persistent() bool { return d.AppendOnly || d.Save != "" }

// ReadRedisDurability asks the server with CONFIG GET. Managed services
// often disable or rename CONFIG; the error says so and the caller cannot
// tell, so it should not warn.
func ReadRedisDurability(ctx context.Context, rdb redis.UniversalClient) (RedisDurability, error) {
	var d RedisDurability
	aof, err := rdb.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return d, fmt.Errorf("redis CONFIG GET appendonly: %w", err)
	}
	save, err := rdb.ConfigGet(ctx, "save").Result()
	if err != nil {
		return d, fmt.Errorf("redis CONFIG GET save: %w", err)
	}
	if _, ok := aof["appendonly"]; !ok {
		return d, fmt.Errorf("redis CONFIG GET appendonly: no such setting")
	}
	d.AppendOnly = strings.EqualFold(aof["appendonly"], "yes")
	d.Save = strings.TrimSpace(save["save"])
	return d, nil
}
