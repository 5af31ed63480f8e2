package domain

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// A load copies a seckill voucher from the database (the record) into the
// live stock, at creation or after the live store lost it. The catalog
// drives it between the two stores, so the words it passes from one to the
// other live here rather than in either store.

// LoadSnapshot is the database's view of a seckill voucher that a load
// into Redis is built from, read under the voucher's row lock.
type LoadSnapshot struct {
	// Voucher carries the stock not taken by persisted live orders.
	Voucher Voucher
	// Users holds the live orders per user.
	Users map[int64]int
	// Requests maps the request ids of the voucher's orders to their ids,
	// so that a client's retry is answered with its order after a reload.
	Requests map[string]int64
	// Reload says Redis held a load of this voucher before and lost it.
	Reload bool
	// Stale says the database sold this voucher directly while Redis was
	// down (the fallback): a load Redis still holds does not know those
	// sales and is replaced, not kept.
	Stale bool
	// Persisted reports which of the order ids the database holds, inside
	// the snapshot's transaction.
	Persisted func(ctx context.Context, ids []int64) (map[int64]bool, error)
}

// LoadResult says what a load of a voucher into the stock Redis did.
type LoadResult int

const (
	// LoadKept: Redis held a load verified on its current server; nothing
	// was written but the metadata.
	LoadKept LoadResult = iota
	// LoadWritten: Redis held no load; one was written.
	LoadWritten
	// LoadRebuilt: Redis held a load that was not verified on its current
	// server (it restarted, perhaps from an older file, or a replica was
	// promoted): the load was replaced by one built from the database and
	// the order log, since Redis may have gone back in time.
	LoadRebuilt
)

// Loader loads a seckill voucher into the stock Redis from a snapshot of
// the database. stamp is the load stamp when the loader wrote the stock
// (Redis had none), "" when Redis already had it.
type Loader func(ctx context.Context, snap LoadSnapshot) (stamp string, err error)

// NewLoadStamp returns a fresh load stamp: it marks one load of a voucher's
// stock, in Redis and in the database, so that an order sold from an
// earlier load is recognised when it is persisted after a reload.
func NewLoadStamp() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
