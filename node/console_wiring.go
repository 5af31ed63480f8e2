package node

import (
	"context"

	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/salestats"
)

// buildSaleStats counts this node's grabs for the console and adds them
// to the cluster's figures once a second (salestats).
func (a *app) buildSaleStats(context.Context) (lifecycle.Service, error) {
	a.saleStats = salestats.New(persistence.NewSaleStats(a.rdb, a.db), a.catalog, a.log, salestats.Options{})
	return lifecycle.NewLoop(a.saleStats.Run), nil
}
