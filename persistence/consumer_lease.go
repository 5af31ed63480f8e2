package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ConsumerName is the Redis key of the lease on one consumer's name in a
// family of logs: a writer's name is its node's identity (NODE_ID) in
// every log's consumer group, and two running processes must not share
// it. Each method is one round trip; lease.Take and lease.Lease decide
// when to call them.
type ConsumerName struct {
	rdb redis.UniversalClient
	key string
}

// ConsumerName returns the lease of consumer in the family. The key is
// the family's lease prefix and the name (keys.go): tools read it.
func (l *Logs) ConsumerName(consumer string) *ConsumerName {
	return &ConsumerName{rdb: l.rdb, key: consumerLeaseKey(l.leasePrefix, consumer)}
}

// Key is the lease's Redis key, for log messages and the holders this
// process keeps.
func (c *ConsumerName) Key() string { return c.key }

// Holder returns the lease's value ("" when free).
func (c *ConsumerName) Holder(ctx context.Context) (string, error) {
	v, err := c.rdb.Get(ctx, c.key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("read lease %s: %w", c.key, err)
	}
	return v, nil
}

// takeLeaseScript takes a consumer name's lease: scripts/take_lease.lua.
var takeLeaseScript = newScript("take_lease")

// refreshLeaseScript extends our lease, or takes it again: scripts/refresh_lease.lua.
var refreshLeaseScript = newScript("refresh_lease")

// releaseLeaseScript drops our lease: scripts/release_lease.lua.
var releaseLeaseScript = newScript("release_lease")

// Take sets the lease to value for ttl if it still holds seen ("" =
// free), and reports whether it did.
func (c *ConsumerName) Take(ctx context.Context, value, seen string, ttl time.Duration) (bool, error) {
	took, err := takeLeaseScript.Run(ctx, c.rdb, []string{c.key}, value, ms(ttl), seen).Int()
	if err != nil {
		return false, fmt.Errorf("take lease %s: %w", c.key, err)
	}
	return took == 1, nil
}

// Renew extends the lease held under value for ttl, or takes it again if
// it lapsed; false when another holder has it.
func (c *ConsumerName) Renew(ctx context.Context, value string, ttl time.Duration) (bool, error) {
	ok, err := refreshLeaseScript.Run(ctx, c.rdb, []string{c.key}, value, ms(ttl)).Int()
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", c.key, err)
	}
	return ok == 1, nil
}

// Release drops the lease if it is still held under value.
func (c *ConsumerName) Release(ctx context.Context, value string) error {
	if err := releaseLeaseScript.Run(ctx, c.rdb, []string{c.key}, value).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", c.key, err)
	}
	return nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
