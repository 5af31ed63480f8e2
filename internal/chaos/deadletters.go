package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// deadLetters follows the service's dead-letter stream for one voucher.
// The stream lives in Redis, so a round that wipes Redis would take the
// evidence with it (an oversold order refused by Postgres would pass for
// an order Redis lost): the suite reads it every 200 ms and right before
// it kills Redis.
type deadLetters struct {
	rdb     *redis.Client
	voucher string

	mu   sync.Mutex
	last string // id of the last entry read; "" reads from the start
	seen []deadLetter
}

// newDeadLetters starts after the stream's current last entry, so that a
// round reads only its own.
func newDeadLetters(ctx context.Context, rdb *redis.Client, voucher int64) (*deadLetters, error) {
	d := &deadLetters{rdb: rdb, voucher: strconv.FormatInt(voucher, 10)}
	last, err := rdb.XRevRangeN(ctx, deadLetterKey, "+", "-", 1).Result()
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	if len(last) > 0 {
		d.last = last[0].ID
	}
	return d, nil
}

// poll reads the entries added since the last poll.
func (d *deadLetters) poll(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for page := 0; page < 100; page++ {
		start := "-"
		if d.last != "" {
			start = "(" + d.last
		}
		entries, err := d.rdb.XRangeN(ctx, deadLetterKey, start, "+", 1000).Result()
		if err != nil {
			return fmt.Errorf("read dead letters: %w", err)
		}
		for _, e := range entries {
			d.last = e.ID
			if v, _ := e.Values["f_v"].(string); v != d.voucher {
				continue
			}
			o, _ := e.Values["f_o"].(string)
			u, _ := e.Values["f_u"].(string)
			reason, _ := e.Values["reason"].(string)
			dl := deadLetter{reason: reason}
			dl.order, _ = strconv.ParseInt(o, 10, 64)
			dl.user, _ = strconv.ParseInt(u, 10, 64)
			d.seen = append(d.seen, dl)
		}
		if len(entries) < 1000 {
			return nil
		}
	}
	return nil
}

// follow polls every 200 ms until ctx ends; a failed poll (Redis down) is
// tried again at the next tick.
func (d *deadLetters) follow(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = d.poll(ctx)
		}
	}
}

// list is every dead letter of the voucher seen so far.
func (d *deadLetters) list() []deadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadLetter(nil), d.seen...)
}
