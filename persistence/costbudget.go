package persistence

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// CostBudgets are the callers' budgets of request cost (COST_BUDGET,
// COST_RESTORE_PER_SEC): one bucket per caller of capacity points,
// refilled at restore points a second, kept with redis_rate's GCRA so
// that every node draws on the same bucket. A request is charged the
// price of what it asks before it runs and given back what it did not
// use once answered (httpapi.CostBudget).
type CostBudgets struct {
	limiter  *redis_rate.Limiter
	limit    redis_rate.Limit
	capacity int
}

// NewCostBudgets returns the budgets; capacity <= 0 switches them off.
func NewCostBudgets(rdb redis.UniversalClient, capacity, restorePerSec int) *CostBudgets {
	if capacity <= 0 || restorePerSec <= 0 {
		return nil
	}
	return &CostBudgets{
		limiter:  redis_rate.NewLimiter(rdb),
		limit:    redis_rate.Limit{Rate: restorePerSec, Burst: capacity, Period: time.Second},
		capacity: capacity,
	}
}

// Capacity is a full bucket, in points.
func (b *CostBudgets) Capacity() int { return b.capacity }

// RestorePerSec is how many points a bucket gets back each second.
func (b *CostBudgets) RestorePerSec() int { return b.limit.Rate }

// Charge takes n points from caller's bucket. When it holds fewer, nothing
// is taken and retry is how long until it holds n; remaining is what the
// bucket holds after the charge.
func (b *CostBudgets) Charge(ctx context.Context, caller string, n int) (remaining int, retry time.Duration, err error) {
	res, err := b.limiter.AllowN(ctx, rateCostKey(caller), b.limit, n)
	if err != nil {
		return 0, 0, fmt.Errorf("charge cost budget of %s: %w", caller, err)
	}
	if res.Allowed == 0 {
		rateLimited.WithLabelValues("cost").Inc()
		return res.Remaining, max(res.RetryAfter, time.Millisecond), nil
	}
	return res.Remaining, 0, nil
}

// Refund gives n points back to caller's bucket, what a request was
// charged and did not use; a bucket never holds more than its capacity.
// GCRA moves the bucket's theoretical arrival time back by n, but
// redis_rate keeps no time before now: a refund that fills the bucket
// resets it instead (a full bucket has no key), so that the points a
// refund gives back are never lost.
func (b *CostBudgets) Refund(ctx context.Context, caller string, n int) (remaining int, err error) {
	if n <= 0 {
		return 0, nil
	}
	key := rateCostKey(caller)
	res, err := b.limiter.AllowN(ctx, key, b.limit, -min(n, math.MaxInt32))
	if err != nil {
		return 0, fmt.Errorf("refund cost budget of %s: %w", caller, err)
	}
	if res.Remaining >= b.capacity {
		if err := b.limiter.Reset(ctx, key); err != nil {
			return 0, fmt.Errorf("refund cost budget of %s: %w", caller, err)
		}
	}
	return min(res.Remaining, b.capacity), nil
}
