package node

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"flashsale/actors"
	"flashsale/internal/lifecycle"
	"flashsale/persistence"
)

// buildRouter builds the sequencers: the router with its rate limits,
// leases, grab store and database fallback, and this node's copy of its
// unread orders (persistence.SoldShadow), whose loop ends before the
// router stops.
func (a *app) buildRouter(context.Context) (lifecycle.Service, error) {
	cfg, log := a.cfg, a.log
	acks := acksOf(cfg)
	a.limits = persistence.NewRateLimits(a.rdb, cfg.RateVoucherPerSec, cfg.RateIPPerSec)
	routerOpts := actors.Options{
		Limits:      a.limits,
		UserRate:    cfg.RateUserPerSec,
		BatchSize:   cfg.GrabBatchSize,
		QueueBound:  cfg.GrabQueueBound,
		GrabTimeout: cfg.GrabTimeout,
		Redis:       a.breaker,
	}
	if acks.Replicas > 0 {
		// A script call and a whole batch get the acknowledgement's wait
		// on top of their own deadlines.
		routerOpts.CallTimeout = actors.CallTimeoutDefault + acks.Timeout
		routerOpts.BatchTimeout = actors.BatchTimeoutDefault + acks.Timeout
	}
	grabClient := a.acked
	if a.hooks.GrabClient != nil {
		grabClient = a.hooks.GrabClient(grabClient)
	}
	grabs := persistence.NewGrabs(grabClient)
	grabs.Acks = acks
	var shadow lifecycle.Service
	if a.mini == nil {
		// The node keeps its OK'd orders until a writer has read them, and
		// appends them again if Redis loses them first (the embedded Redis
		// dies with the process and this copy).
		s := persistence.NewSoldShadow(a.bg, a.db, cfg.NodeID, log)
		grabs.Shadow = s
		shadow = lifecycle.NewLoop(s.Run)
	}
	if cfg.DegradeToDB {
		a.fallback = persistence.NewDBGrabs(a.db, a.breaker, 0)
		routerOpts.Fallback = a.fallback
	}
	routerOpts.Sold = a.live.Sold
	routerOpts.Leases = newSegmentLeases(a.locks.redlock, cfg.SegmentLeaseTTL)
	grabTimeout := cmp.Or(cfg.GrabTimeout, actors.GrabTimeoutDefault)
	routerOpts.LeaseWait = min(cfg.SegmentLeaseTTL+time.Second, max(grabTimeout-time.Second, grabTimeout/2))
	if err := a.traceRouter(&routerOpts); err != nil {
		return nil, err
	}
	if a.hooks.Actors != nil {
		a.hooks.Actors(&routerOpts)
	}
	if cfg.ClusterProvider == "test" {
		// One node: plain local actors behind the same router, under the
		// same leases and fencing (docs/DECISIONS.md, "A single node is
		// not a cluster member").
		a.router = actors.NewRouter(grabs, a.ids, a.catalog, log, routerOpts)
		return withShadow(a.router, shadow), nil
	}
	co, err := clusterOptions(cfg)
	if err != nil {
		return nil, err
	}
	if a.router, err = actors.NewClusteredRouter(grabs, a.ids, a.catalog, log, routerOpts, co); err != nil {
		return nil, fmt.Errorf("cluster (%s): %w", clusterLabel(cfg), err)
	}
	return withShadow(a.router, shadow), nil
}

// withShadow is the router with the sold shadow's loop, if any, which
// stops first.
func withShadow(router *actors.Router, shadow lifecycle.Service) lifecycle.Service {
	if shadow == nil {
		return router
	}
	return lifecycle.NewGroup(lifecycle.Named{Name: "router", Service: router}, lifecycle.Named{Name: "sold shadow", Service: shadow})
}

// joinCluster makes the router a cluster member (leaving is the router's
// Stop).
func (a *app) joinCluster(context.Context) error {
	if c := a.router.Cluster(); c != nil {
		c.Join()
	}
	return nil
}

// buildVoucherEvents follows the voucher events (pause, restock, ...)
// into the router's actors.
func (a *app) buildVoucherEvents(context.Context) (lifecycle.Service, error) {
	return newFollower(persistence.NewStock(a.bg).Subscribe, func(ctx context.Context, events *persistence.Subscription) {
		if err := a.router.Follow(ctx, events); err != nil {
			a.log.Error("voucher-event watcher stopped", "err", err)
		}
	}), nil
}
