package node

import (
	"context"
	"errors"

	"flashsale/internal/lifecycle"
	"flashsale/persistence"
	"flashsale/usecase/queue"
)

// buildQueue wires the waiting rooms: their line in the stock Redis,
// through the grab path's client and its acknowledgements (a place or an
// admission a failover took back would be given twice); their pacer runs
// on every node.
func (a *app) buildQueue(context.Context) (lifecycle.Service, error) {
	store := persistence.NewQueue(a.acked)
	store.Acks = acksOf(a.cfg)
	a.queue = queue.New(store, a.gate, a.gate.Tickets(), persistence.NewVouchers(a.db), a.log, queue.Options{
		ReleaseBefore: a.cfg.TicketReleaseBefore,
		TicketTTL:     a.cfg.TicketTTL,
		IsRoomMissing: func(err error) bool { return errors.Is(err, persistence.ErrRoomMissing) },
	})
	return a.queue.Pacer(), nil
}
