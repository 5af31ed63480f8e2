package persistence_test

import (
	"testing"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// Each order-log entry carries the request id the order was sold under, so
// that the order can be traced back to the grab (and a client's key) that
// bought it.
func TestOrderLogEntriesCarryTheRequestID(t *testing.T) {
	t.Parallel()
	db, rdb := testenv.MustPostgres(t), testenv.MustRedis(t).Client()
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	fence, _, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch := testenv.Grabs(t, ids, 1, 2)
	batch[1].RequestID = "u2:client key ~!"
	if _, err := g.Grab(t.Context(), v.ID, 0, fence, batch); err != nil {
		t.Fatal(err)
	}
	entries, err := rdb.XRange(t.Context(), persistence.LogKey(v.ID), "-", "+").Result()
	if err != nil || len(entries) != len(batch) {
		t.Fatalf("order log %v, %v; want %d entries", entries, err, len(batch))
	}
	for i, e := range entries {
		if e.Values[persistence.EntryRequestID] != batch[i].RequestID {
			t.Fatalf("entry %d: request id %v, want %q", i, e.Values[persistence.EntryRequestID], batch[i].RequestID)
		}
	}
}
