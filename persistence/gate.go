package persistence

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// Gate keeps the blocklist and the used challenges in Redis and announces
// gate changes to every node.
type Gate struct{ rdb redis.UniversalClient }

// NewGate returns the gate store over rdb.
func NewGate(rdb redis.UniversalClient) *Gate { return &Gate{rdb: rdb} }

func blockField(b domain.Block) string {
	if b.UserID > 0 {
		return strconv.FormatInt(b.VoucherID, 10) + "|u:" + strconv.FormatInt(b.UserID, 10)
	}
	return strconv.FormatInt(b.VoucherID, 10) + "|n:" + b.Net.Masked().String()
}

func parseBlock(field, value string) (domain.Block, bool) {
	voucher, target, ok := strings.Cut(field, "|")
	if !ok {
		return domain.Block{}, false
	}
	var b domain.Block
	var err error
	if b.VoucherID, err = strconv.ParseInt(voucher, 10, 64); err != nil {
		return domain.Block{}, false
	}
	switch {
	case strings.HasPrefix(target, "u:"):
		if b.UserID, err = strconv.ParseInt(target[2:], 10, 64); err != nil {
			return domain.Block{}, false
		}
	case strings.HasPrefix(target, "n:"):
		if b.Net, err = netip.ParsePrefix(target[2:]); err != nil {
			return domain.Block{}, false
		}
	default:
		return domain.Block{}, false
	}
	ms, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return domain.Block{}, false
	}
	if ms > 0 {
		b.ExpiresAt = time.UnixMilli(ms).UTC()
	}
	return b, true
}

// Block adds (or replaces) a block and announces it.
func (g *Gate) Block(ctx context.Context, b domain.Block) error {
	var ms int64
	if !b.ExpiresAt.IsZero() {
		ms = b.ExpiresAt.UnixMilli()
	}
	_, err := g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, blocksKey, blockField(b), ms)
		p.Publish(ctx, gateChannel, "blocks")
		return nil
	})
	if err != nil {
		return fmt.Errorf("block: %w", err)
	}
	return nil
}

// Unblock removes a block, reporting whether there was one, and announces it.
func (g *Gate) Unblock(ctx context.Context, b domain.Block) (bool, error) {
	var del *redis.IntCmd
	_, err := g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.HDel(ctx, blocksKey, blockField(b))
		p.Publish(ctx, gateChannel, "blocks")
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("unblock: %w", err)
	}
	return del.Val() > 0, nil
}

// Blocks reads every block, expired ones included (the caller compares
// expiries with its clock; an expired block is harmless and is removed by
// unblock).
func (g *Gate) Blocks(ctx context.Context) ([]domain.Block, error) {
	all, err := g.rdb.HGetAll(ctx, blocksKey).Result()
	if err != nil {
		return nil, fmt.Errorf("read blocks: %w", err)
	}
	out := make([]domain.Block, 0, len(all))
	for f, v := range all {
		if b, ok := parseBlock(f, v); ok {
			out = append(out, b)
		}
	}
	return out, nil
}

// AnnounceVoucher tells every node that a voucher's gate changed.
func (g *Gate) AnnounceVoucher(ctx context.Context, voucherID int64) error {
	if err := g.rdb.Publish(ctx, gateChannel, "voucher:"+strconv.FormatInt(voucherID, 10)).Err(); err != nil {
		return fmt.Errorf("announce gate of voucher %d: %w", voucherID, err)
	}
	return nil
}

// UseChallenge marks a solved challenge (by its digest) used until it
// expires, and reports whether it was unused: one SET NX.
func (g *Gate) UseChallenge(ctx context.Context, digest string, until time.Time) (bool, error) {
	ok, err := g.rdb.SetArgs(ctx, usedChallengeKey(digest), "1", redis.SetArgs{Mode: "NX", ExpireAt: until}).Result()
	if err == redis.Nil {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("use challenge: %w", err)
	}
	return ok == "OK", nil
}

// Subscribe subscribes to the gate's announcements: a
// domain.BlocklistChanged when the blocklist changed, a
// domain.GateChanged when a voucher's gate did, and a domain.Missed at
// every (re)subscription (a message may have been missed). The owner
// reads it with Next and closes it.
func (g *Gate) Subscribe(ctx context.Context) *Subscription {
	return subscribe(ctx, g.rdb, 256, []string{gateChannel}, func(_, payload string) (domain.Announcement, bool) {
		if payload == "blocks" {
			return domain.Announcement{Kind: domain.BlocklistChanged}, true
		}
		if s, ok := strings.CutPrefix(payload, "voucher:"); ok {
			if id, err := strconv.ParseInt(s, 10, 64); err == nil {
				return domain.Announcement{Kind: domain.GateChanged, IDs: []int64{id}}, true
			}
		}
		return domain.Announcement{}, false
	}, gateChannel)
}
