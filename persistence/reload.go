package persistence

import (
	"context"
	"fmt"
)

// Adoption: orders sold from an earlier Redis load of a voucher than the
// one the database recorded, returned to the reloaded stock by the order
// writer's transaction (see Stock.Preheat for the orders a reload counts
// itself).

// adoptOrdersScript returns orders a reload missed to its stock: scripts/adopt_orders.lua.
var adoptOrdersScript = newScript("adopt_orders")

// adopt handles the orders of this transaction that were sold from an
// earlier Redis load of their voucher than the one the database recorded:
// Redis lost the voucher and reloaded it from the database while these
// orders were on their way, so the reload may not have counted them. It
// runs inside the transaction, before the commit, so that a crash cannot
// persist an order and forget to adopt it; a retried transaction adopts
// nothing twice. Orders that can no longer be adopted abort the
// transaction with refusedOrders: they are dead-lettered, never persisted
// beside units that were sold again.
func (w *OrderWriter) adopt(ctx context.Context, inserted []int64, rowByID map[int64]*orderRow, byID map[int64][]*pendingOrder, locked map[int64]lockedVoucher) error {
	perVoucher := map[int64][]any{}
	for _, id := range inserted {
		o := rowByID[id]
		stamp, cur := byID[id][0].stamp, locked[o.VoucherID].stamp
		if stamp == "" || cur == "" || stamp == cur {
			continue
		}
		perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], o.ID, o.UserID, deref(o.RequestID))
	}
	lost := &refusedOrders{reason: DeadLostLoad, ids: map[int64]bool{}}
	for v, triples := range perVoucher {
		args := append([]any{locked[v].stamp}, triples...)
		keys := []string{metaKey(v), stockKey(v), usersKey(v), adoptedKey(v), reqKey(v)}
		res, err := adoptOrdersScript.Run(ctx, w.rdb, keys, args...).Int64Slice()
		if err != nil || len(res) != 1 {
			return fmt.Errorf("return %d orders of voucher %d to its reloaded stock: %v %w", len(triples)/3, v, res, err)
		}
		switch n := res[0]; {
		case n == -1:
			w.log.WarnContext(ctx, "redis held an unrecorded load of the voucher; removed it so that it reloads with these orders",
				"voucher", v, "orders", len(triples)/3)
		case n < -1:
			for i := 0; i < len(triples); i += 3 {
				lost.ids[triples[i].(int64)] = true
			}
		case n > 0:
			ordersAdopted.Add(float64(n))
			w.log.WarnContext(ctx, "orders sold before redis reloaded the voucher were returned to its stock", "voucher", v, "orders", n)
		}
	}
	if len(lost.ids) > 0 {
		return lost
	}
	return nil
}
