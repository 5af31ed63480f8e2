package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// The sale's figures of one second, summed over the nodes, for the
// console: every node adds its own second to the voucher's hash of that
// second once the second is over, so whichever node a console asks reads
// the cluster's figures.
func saleSecondKey(id, second int64) string {
	return voucherTag(id) + ":ss:" + strconv.FormatInt(second, 10)
}
func saleAnsweredKey(id int64) string { return voucherTag(id) + ":ssok" }

// Fields of a second's hash: saleFieldNodes counts the nodes that added
// to it; saleFieldCode+<code> the grabs answered with code;
// saleFieldLatency+<bucket> the grabs whose latency fell in the bucket
// (domain.LatencyBucket).
const (
	saleFieldNodes   = "nodes"
	saleFieldCode    = "c:"
	saleFieldLatency = "l:"
)

const (
	// saleSecondTTL keeps a second's figures long enough for a console
	// that reads a few seconds late, and no longer: they are not history.
	saleSecondTTL = 2 * time.Minute
	// saleAnsweredTTL keeps the OK count for a day after the voucher's
	// last grab.
	saleAnsweredTTL = 24 * time.Hour
)

// SaleStats is the store of the sales' per-second figures and of what
// the console reads beside them.
type SaleStats struct {
	rdb redis.UniversalClient
	db  bun.IDB
}

// NewSaleStats returns the store over rdb and db.
func NewSaleStats(rdb redis.UniversalClient, db bun.IDB) *SaleStats {
	return &SaleStats{rdb: rdb, db: db}
}

// Add adds a node's seconds to the cluster's, in one round trip.
func (s *SaleStats) Add(ctx context.Context, seconds []domain.SaleSecond) error {
	if len(seconds) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, sec := range seconds {
		key := saleSecondKey(sec.VoucherID, sec.Second)
		pipe.HIncrBy(ctx, key, saleFieldNodes, 1)
		for i, n := range sec.Codes {
			if n != 0 {
				pipe.HIncrBy(ctx, key, saleFieldCode+domain.SaleCodes[i], n)
			}
		}
		for i, n := range sec.Latency {
			if n != 0 {
				pipe.HIncrBy(ctx, key, saleFieldLatency+strconv.Itoa(i), n)
			}
		}
		pipe.Expire(ctx, key, saleSecondTTL)
		if ok := sec.Codes[domain.SaleCodeIndex(domain.SeckillOK)]; ok > 0 {
			pipe.IncrBy(ctx, saleAnsweredKey(sec.VoucherID), ok)
			pipe.Expire(ctx, saleAnsweredKey(sec.VoucherID), saleAnsweredTTL)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("add %d seconds of sale figures: %w", len(seconds), err)
	}
	return nil
}

// Second reads the cluster's figures of a voucher's second (zero when no
// node answered a grab of it then) and the OK answers so far.
func (s *SaleStats) Second(ctx context.Context, voucherID, second int64) (domain.SaleSecond, int64, error) {
	out := domain.SaleSecond{VoucherID: voucherID, Second: second}
	pipe := s.rdb.Pipeline()
	fields := pipe.HGetAll(ctx, saleSecondKey(voucherID, second))
	answered := pipe.Get(ctx, saleAnsweredKey(voucherID))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return out, 0, fmt.Errorf("read the sale figures of voucher %d: %w", voucherID, err)
	}
	for f, v := range fields.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue // not ours to fail on: the figures are a view
		}
		switch {
		case f == saleFieldNodes:
			out.Nodes = n
		case strings.HasPrefix(f, saleFieldCode):
			for i, c := range domain.SaleCodes {
				if c == f[len(saleFieldCode):] {
					out.Codes[i] = n
				}
			}
		case strings.HasPrefix(f, saleFieldLatency):
			if i, err := strconv.Atoi(f[len(saleFieldLatency):]); err == nil && i >= 0 && i < domain.LatencyBuckets {
				out.Latency[i] = n
			}
		}
	}
	ok, _ := strconv.ParseInt(answered.Val(), 10, 64)
	return out, ok, nil
}

// Room reads a voucher's waiting room: the users in line and those
// admitted so far; false when Redis holds no room of it.
func (s *SaleStats) Room(ctx context.Context, voucherID int64) (domain.RoomFigures, bool, error) {
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, roomKey(voucherID))
	waiting := pipe.ZCard(ctx, lineKey(voucherID))
	admitted := pipe.HGet(ctx, roomKey(voucherID), qmAdmitted)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return domain.RoomFigures{}, false, fmt.Errorf("read the waiting room of voucher %d: %w", voucherID, err)
	}
	if exists.Val() == 0 {
		return domain.RoomFigures{}, false, nil
	}
	n, _ := strconv.ParseInt(admitted.Val(), 10, 64)
	return domain.RoomFigures{Waiting: waiting.Val(), Admitted: n}, true, nil
}

// StoredOrders counts a voucher's live orders in the database (an index
// range of its orders).
func (s *SaleStats) StoredOrders(ctx context.Context, voucherID int64) (int, error) {
	n, err := s.db.NewSelect().Table("tb_voucher_order").
		Where("voucher_id = ?", voucherID).
		Where("status NOT IN (?)", bun.In(domain.DeadOrderStatuses)).
		Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("count stored orders of voucher %d: %w", voucherID, err)
	}
	return int(n), nil
}
