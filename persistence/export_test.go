package persistence

import (
	"context"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
)

// LogOrder is an order as the order log holds it, for tests of the
// writer's SQL.
type LogOrder struct {
	ID, UserID, VoucherID int64
	Slot                  int    // 1 or 0 (none)
	RequestID             string // "" for none
	Created               time.Time
}

// WriteLogOrders runs the order writer's three inserts for orders in one
// transaction, in the array form or the VALUES form: the orders (returning
// the ids inserted), a sale ledger row each, and their users' live-order
// counters under limit.
func WriteLogOrders(ctx context.Context, db *bun.DB, arrays bool, orders []LogOrder, limit int) (inserted []int64, err error) {
	rows := make([]orderRow, len(orders))
	byID := map[int64]orderRow{}
	for i, o := range orders {
		rows[i] = orderRow{ID: o.ID, UserID: o.UserID, VoucherID: o.VoucherID, Status: domain.OrderUnpaid,
			CreateTime: o.Created, UpdateTime: o.Created.Add(time.Second)}
		if o.Slot != 0 {
			rows[i].Slot = &o.Slot
		}
		if o.RequestID != "" {
			rows[i].RequestID = &o.RequestID
		}
		byID[o.ID] = rows[i]
	}
	// As insertOrders: only the orders inserted get a ledger row and count
	// for their users.
	sold := func() ([]ledgerRow, []voucherUserRow) {
		var ledger []ledgerRow
		var users []voucherUserRow
		perUser := map[[2]int64]int{}
		for _, id := range inserted {
			o := byID[id]
			ref := id
			ledger = append(ledger, ledgerRow{VoucherID: o.VoucherID, Delta: -1, Reason: ReasonSale, RefID: &ref, CreateTime: o.CreateTime})
			k := [2]int64{o.VoucherID, o.UserID}
			if perUser[k] == 0 {
				users = append(users, voucherUserRow{VoucherID: o.VoucherID, UserID: o.UserID, PerUserLimit: limit})
			}
			perUser[k]++
		}
		for i := range users {
			users[i].Live = perUser[[2]int64{users[i].VoucherID, users[i].UserID}]
		}
		return ledger, users
	}
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if !arrays {
			if inserted, err = insertOrderValues(ctx, tx, rows); err != nil || len(inserted) == 0 {
				return err
			}
			ledger, users := sold()
			if err = insertLedgerValues(ctx, tx, ledger); err != nil {
				return err
			}
			return upsertLiveOrderValues(ctx, tx, users)
		}
		if !allFresh(rows) {
			panic("test orders the array form does not take")
		}
		if inserted, err = insertOrderArrays(ctx, tx, rows); err != nil || len(inserted) == 0 {
			return err
		}
		ledger, users := sold()
		if err = insertLedgerArrays(ctx, tx, ledger); err != nil {
			return err
		}
		return upsertLiveOrderArrays(ctx, tx, users)
	})
	return inserted, err
}

// ScriptSources is the text Redis runs of every script in scripts/, by
// file name.
func ScriptSources() (map[string]string, error) {
	entries, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		out[name] = scriptSource(name)
	}
	return out, nil
}

// InsertPackets stores red packet id (a tb_red_packet row) and its
// packets in one transaction, the packets in the create's array form or
// its VALUES form.
func InsertPackets(ctx context.Context, db *bun.DB, arrays bool, id int64, amounts []int64) error {
	var total int64
	for _, a := range amounts {
		total += a
	}
	now := time.Now().UTC()
	row := redPacketRow{ID: id, CreatorID: 7, TotalCents: total, Count: len(amounts), ExpireTime: now.Add(time.Hour), CreateTime: now}
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&row).Exec(ctx); err != nil {
			return err
		}
		if arrays {
			return insertPacketArray(ctx, tx, id, amounts)
		}
		return insertPacketValues(ctx, tx, id, amounts)
	})
}

// QueueKeys are a voucher's waiting-room keys and its stock key, for tests
// of the room's scripts: the settings, the line, the open tickets, the
// admissions, the stock.
func QueueKeys(voucherID int64) (room, line, open, admitted, stock string) {
	return roomKey(voucherID), lineKey(voucherID), openKey(voucherID), admittedKey(voucherID), stockKey(voucherID)
}
