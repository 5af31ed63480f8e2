package graph

import (
	"context"
	"math"
	"strconv"
	"time"

	"flashsale/domain"
	"flashsale/graph/model"
	"flashsale/internal/auth"
)

// Gate is the grab gate against bots and scalpers (implemented by
// gate.Service): grab tickets, proof-of-work challenges, blocklists and the
// server's clock. Checking a grab is the grab use case's (seckill.Service).
type Gate interface {
	Now() time.Time
	Challenge(ctx context.Context, user int64, ip string, voucher int64) (string, int, time.Time, error)
	Ticket(ctx context.Context, user int64, ip string, voucher int64, challenge, nonce string) (string, time.Time, error)
	SetGate(ctx context.Context, id int64, change domain.GateChange) (domain.Voucher, error)
	Block(ctx context.Context, b domain.Block) error
	Unblock(ctx context.Context, b domain.Block) (bool, error)
	Blocks(ctx context.Context) ([]domain.Block, error)
	// Terms is a seckill voucher's terms from the node's cache (no
	// database read), for the live stock events.
	Terms(ctx context.Context, id int64) (domain.Seckill, error)
}

// deref is an optional string argument's value, "" when absent.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// now is the server's clock: the gate's when there is one.
func (r *Resolver) now() time.Time {
	if r.Gate != nil {
		return r.Gate.Now()
	}
	return time.Now()
}

// gate is the gate for a field that needs one.
func (r *Resolver) gate(name string) (Gate, error) {
	if r.Gate == nil {
		return nil, notImplemented(name)
	}
	return r.Gate, nil
}

func (r *Resolver) seckillChallenge(ctx context.Context, voucherID int64) (*model.SeckillChallenge, error) {
	g, err := r.gate("seckillChallenge")
	if err != nil {
		return nil, err
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	c, d, exp, err := g.Challenge(ctx, id.UserID, auth.ClientIP(ctx), voucherID)
	if err != nil {
		return nil, err
	}
	return &model.SeckillChallenge{Challenge: c, Difficulty: d, ExpiresAt: exp}, nil
}

func (r *Resolver) seckillTicket(ctx context.Context, voucherID int64, challenge, nonce *string) (*model.SeckillTicket, error) {
	g, err := r.gate("seckillTicket")
	if err != nil {
		return nil, err
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	t, exp, err := g.Ticket(ctx, id.UserID, auth.ClientIP(ctx), voucherID, deref(challenge), deref(nonce))
	if err != nil {
		return nil, err
	}
	return &model.SeckillTicket{Ticket: t, ExpiresAt: exp}, nil
}

func (r *Resolver) setVoucherGate(ctx context.Context, id int64, requireTicket *bool, challenge *model.ChallengeKind) (*model.Voucher, error) {
	g, err := r.gate("setVoucherGate")
	if err != nil {
		return nil, err
	}
	change := domain.GateChange{RequireTicket: requireTicket}
	if challenge != nil {
		k := challengeFromModel(*challenge)
		change.Challenge = &k
	}
	if _, err := g.SetGate(ctx, id, change); err != nil {
		return nil, err
	}
	v, err := r.Catalog.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return voucherToModel(v), nil
}

func blockFromModel(t model.BlockTarget) (domain.Block, error) {
	var b domain.Block
	if t.VoucherID != nil {
		if *t.VoucherID <= 0 {
			return b, domain.InvalidField("voucherId", "must be a positive id")
		}
		b.VoucherID = *t.VoucherID
	}
	switch {
	case (t.UserID == nil) == (t.IP == nil):
		return b, domain.InvalidField("target", "give exactly one of userId and ip")
	case t.UserID != nil:
		if *t.UserID <= 0 {
			return b, domain.InvalidField("userId", "must be a positive id")
		}
		b.UserID = *t.UserID
	default:
		p, err := domain.ParseNet(*t.IP)
		if err != nil {
			return b, domain.InvalidField("ip", "%v", err)
		}
		b.Net = p
	}
	return b, nil
}

func blockToModel(b domain.Block) *model.Block {
	out := &model.Block{}
	if b.UserID > 0 {
		u := b.UserID
		out.UserID = &u
	} else {
		ip := b.Net.String()
		out.IP = &ip
	}
	if b.VoucherID > 0 {
		v := b.VoucherID
		out.VoucherID = &v
	}
	if !b.ExpiresAt.IsZero() {
		e := b.ExpiresAt
		out.ExpiresAt = &e
	}
	return out
}

// maxBlockSeconds bounds a block's expiry (ten years); null is for ever.
const maxBlockSeconds = 10 * 365 * 24 * 3600

func (r *Resolver) block(ctx context.Context, target model.BlockTarget, expiresInSeconds *int) (*model.Block, error) {
	g, err := r.gate("block")
	if err != nil {
		return nil, err
	}
	b, err := blockFromModel(target)
	if err != nil {
		return nil, err
	}
	if expiresInSeconds != nil {
		if *expiresInSeconds < 1 || *expiresInSeconds > maxBlockSeconds {
			return nil, domain.InvalidField("expiresInSeconds", "must be between 1 and %d (null: until unblocked)", maxBlockSeconds)
		}
		b.ExpiresAt = g.Now().Add(time.Duration(*expiresInSeconds) * time.Second).UTC().Truncate(time.Millisecond)
	}
	if err := g.Block(ctx, b); err != nil {
		return nil, err
	}
	return blockToModel(b), nil
}

func (r *Resolver) unblock(ctx context.Context, target model.BlockTarget) (bool, error) {
	g, err := r.gate("unblock")
	if err != nil {
		return false, err
	}
	b, err := blockFromModel(target)
	if err != nil {
		return false, err
	}
	return g.Unblock(ctx, b)
}

func (r *Resolver) blocks(ctx context.Context) ([]*model.Block, error) {
	g, err := r.gate("blocks")
	if err != nil {
		return nil, err
	}
	all, err := g.Blocks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*model.Block, len(all))
	for i, b := range all {
		out[i] = blockToModel(b)
	}
	return out, nil
}

// msUntil is t - now in milliseconds, clamped to GraphQL's 32-bit Int.
func msUntil(t, now time.Time) int {
	ms := t.Sub(now).Milliseconds()
	return int(max(min(ms, math.MaxInt32), math.MinInt32))
}

var challengeKinds = map[model.ChallengeKind]domain.ChallengeKind{
	model.ChallengeKindNone: domain.ChallengeNone,
	model.ChallengeKindPow:  domain.ChallengePOW,
}

func challengeFromModel(k model.ChallengeKind) domain.ChallengeKind {
	if c, ok := challengeKinds[k]; ok {
		return c
	}
	return -1
}

func challengeToModel(c domain.ChallengeKind) model.ChallengeKind {
	for m, d := range challengeKinds {
		if d == c {
			return m
		}
	}
	return model.ChallengeKind("UNKNOWN_" + strconv.Itoa(int(c)))
}
