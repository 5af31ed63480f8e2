package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// StatusVersions reads, in one round trip, the version of the status Redis
// holds for each voucher: the row's update time the status was copied
// with (Stock.SetStatus, Stock.Preheat). A voucher not in Redis is absent.
// The status sync compares it with the record's to find the changes Redis
// missed.
func (s *Stock) StatusVersions(ctx context.Context, ids []int64) (map[int64]time.Time, error) {
	out := make(map[int64]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	vers := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		vers[i] = pipe.HGet(ctx, metaKey(id), "ver")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read voucher status versions: %w", unavailable(err))
	}
	for i, id := range ids {
		raw, err := vers[i].Result()
		if err != nil {
			continue
		}
		micros, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("voucher %d: status version %q in redis is not a number", id, raw)
		}
		out[id] = time.UnixMicro(micros)
	}
	return out, nil
}
