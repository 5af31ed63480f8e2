package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/salestats"
)

// The console's figures: what the grabs count (salestats) and what every
// node reports of itself once a second (the cluster view).

// buildSaleStats counts this node's grabs for the console and adds them
// to the cluster's figures once a second (salestats).
func (a *app) buildSaleStats(context.Context) (lifecycle.Service, error) {
	a.saleStats = salestats.New(persistence.NewSaleStats(a.rdb, a.db), a.catalog, a.log, salestats.Options{})
	a.nodes = persistence.NewNodeStatuses(a.rdb)
	return lifecycle.NewLoop(a.saleStats.Run), nil
}

// buildNodeStatus reports the node's status once a second, from when its
// port is bound (the status names it).
func (a *app) buildNodeStatus(context.Context) (lifecycle.Service, error) {
	return lifecycle.NewLoop(a.reportStatus), nil
}

// reportStatus reports the node's status once a second until ctx ends;
// a failed report is logged at debug level (the next one follows).
func (a *app) reportStatus(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := a.nodes.Put(ctx, a.status(ctx)); err != nil && ctx.Err() == nil {
			a.log.Debug("node status not reported", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// status is the node's status now.
func (a *app) status(ctx context.Context) domain.NodeStatus {
	s := domain.NodeStatus{
		ID:          a.cfg.NodeID,
		RedisMode:   a.target.Mode(),
		Redis:       a.target.String(),
		AckReplicas: a.cfg.RedisAckReplicas,
		AckTimeout:  a.cfg.RedisAckTimeout,
		AckAOF:      a.cfg.RedisAckAOF,
		At:          time.Now(),
	}
	if a.listener != nil {
		s.HTTPAddr = a.listener.Addr().String()
	}
	if a.router != nil {
		s.Segments = a.router.Hosted()
		if c := a.router.Cluster(); c != nil {
			s.Member, s.Members = c.Address(), c.Members()
		}
	}
	if a.holds != nil {
		s.Held = a.holds.Vouchers()
	}
	if cc, ok := a.rdb.(*redis.ClusterClient); ok {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		var mu sync.Mutex // ForEachMaster calls fn on every primary at once
		_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			s.Primaries = append(s.Primaries, c.Options().Addr)
			return nil
		})
		slices.Sort(s.Primaries)
	} else if a.cfg.RedisMode != persistence.RedisSentinel && a.cfg.RedisURL != "" {
		s.Primaries = []string{a.target.String()}
	}
	return s
}
