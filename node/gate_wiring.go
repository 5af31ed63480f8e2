package node

import (
	"context"
	"fmt"
	"time"

	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/gate"
)

// buildGate wires the grab gate against bots and scalpers and loads its
// blocklist; its service follows the gate's changes in the background and
// closes its own client, if any, at Stop. Its key is TICKET_SECRET, or
// derived from the JWT secret, which every node shares: a ticket from one
// node holds on every other.
func (a *app) buildGate(ctx context.Context) (lifecycle.Service, error) {
	key := gate.KeyFrom(a.secret)
	if a.cfg.TicketSecret != "" {
		key = []byte(a.cfg.TicketSecret)
	}
	rdb := a.rdb
	if a.hooks.GateRedis != nil {
		// A client of its own, tuned and guarded as the request path's,
		// so that the hook sees the gate's commands and no others.
		a.gateRdb = a.traceRedis(a.target.Client(persistence.RequestTuning(0)))
		a.gateRdb.AddHook(a.breaker)
		a.gateRdb.AddHook(persistence.RedisErrors{})
		a.gateRdb.AddHook(a.hooks.GateRedis)
		rdb = a.gateRdb
	}
	g := gate.New(persistence.NewGate(rdb), persistence.NewVouchers(a.db), a.log, gate.Options{
		Key:           key,
		ReleaseBefore: a.cfg.TicketReleaseBefore,
		TicketTTL:     a.cfg.TicketTTL,
		ChallengeTTL:  a.cfg.ChallengeTTL,
		Difficulty:    a.cfg.PowDifficulty,
		Refresh:       a.cfg.GateRefresh,
	})
	// The gate reads through the request path's client, which fails fast
	// by design (one dial, 200 ms); at start a Redis or sentinel slow to
	// answer must not stop the node, so the first read is tried for up to
	// 5 s (measured: nodes failing to start with "i/o timeout" on a
	// loaded machine).
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err = g.Load(ctx); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	client := lifecycle.Func(nil, a.closeGate)
	if err != nil {
		return client, fmt.Errorf("blocklist: %w", err)
	}
	a.gate = g
	return lifecycle.NewGroup(
		lifecycle.Named{Name: "gate client", Service: client},
		lifecycle.Named{Name: "gate announcements", Service: newFollower(persistence.NewGate(a.bg).Subscribe,
			func(ctx context.Context, announcements *persistence.Subscription) { g.Run(ctx, announcements) })},
	), nil
}

// closeGate closes the gate's own client (Hooks.GateRedis only).
func (a *app) closeGate() {
	if a.gateRdb != nil {
		_ = a.gateRdb.Close()
	}
}
