package persistence

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// SellersFamily names the nodes' lease rows for their SoldShadow in
// tb_writer_lease.
const SellersFamily = "sellers"

// shadowCheckScript reads a voucher's load and how far its log was read: scripts/shadow_check.lua.
var shadowCheckScript = newScript("shadow_check")

// shadowAppendScript appends kept orders back to a voucher's log: scripts/shadow_append.lua.
var shadowAppendScript = newScript("shadow_append")

// ShadowEvery is how often a SoldShadow looks at what the writers have
// read and reports its lease row.
const ShadowEvery = 100 * time.Millisecond

// ShadowMaxOrders bounds the orders a node keeps. Past it (no order writer
// has read for that long) the oldest are let go, with a WARN: those rely
// on Redis alone again.
const ShadowMaxOrders = 500_000

// SoldShadow is a node's copy of the orders it answered OK that no order
// writer has read yet: the only other copy of such an order is its entry
// in the voucher's order log in Redis, and a Redis that loses data
// without a crash of this node (FLUSHALL, a restart without its files, a
// promoted replica that lacked the batch, an evicted log) would take the
// order with it, though the buyer was told OK.
//
// Grabs adds a batch's OK'd orders before their answers are given. Every
// ShadowEvery, Run reads for each voucher the load Redis holds and how far
// the writers have read its log: a batch whose log position they passed
// is dropped (a writer holds it now, and a reload waits for writers,
// WriterLeases); a batch sold from a load Redis no longer holds, or whose
// log is gone, is appended to the log again, under its own load stamp, so
// that the writer stores it and returns it to a reloaded stock
// (adopt_orders.lua). Run also keeps the node's lease row (family
// SellersFamily): clean_at is the database's time before which every
// order this node answered OK has been read by a writer, and a reload's
// hold waits for it as for the writers' (catalog.Holds).
type SoldShadow struct {
	rdb      redis.UniversalClient
	rows     *WriterLeases
	consumer string
	log      *slog.Logger

	mu       sync.Mutex
	vouchers map[int64][]*shadowBatch
	orders   int

	// The last report of the lease row: the database's time it ran at,
	// and this process's clock when its answer came (after that time).
	lastDB, lastAnswer time.Time
}

// shadowBatch is one batch's OK'd orders.
type shadowBatch struct {
	stamp  string // the load they were sold from: written into their entries
	load   string // the load whose log holds entry
	entry  string // the log position that covers them ('' = stored already)
	at     string // EntryTime
	slot   string // EntrySlot
	orders []domain.Grab
	added  time.Time
}

// NewSoldShadow returns the shadow of the node named consumer (NODE_ID).
func NewSoldShadow(rdb redis.UniversalClient, db bun.IDB, consumer string, log *slog.Logger) *SoldShadow {
	return &SoldShadow{rdb: rdb, rows: NewWriterLeases(db, SellersFamily), consumer: consumer, log: log,
		vouchers: map[int64][]*shadowBatch{}}
}

// Add keeps a batch's OK'd orders of the voucher.
func (s *SoldShadow) Add(voucherID int64, b shadowBatch) {
	if b.entry == "" {
		return // the log was empty: every order it answered is stored
	}
	b.added = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vouchers[voucherID] = append(s.vouchers[voucherID], &b)
	s.orders += len(b.orders)
	if s.orders > ShadowMaxOrders {
		s.trimLocked()
	}
}

// trimLocked lets the oldest batches go until the bound holds.
func (s *SoldShadow) trimLocked() {
	dropped := 0
	for s.orders > ShadowMaxOrders {
		var oldest int64
		var at time.Time
		for id, bs := range s.vouchers {
			if len(bs) > 0 && (at.IsZero() || bs[0].added.Before(at)) {
				oldest, at = id, bs[0].added
			}
		}
		b := s.vouchers[oldest][0]
		s.vouchers[oldest] = s.vouchers[oldest][1:]
		s.orders -= len(b.orders)
		dropped += len(b.orders)
	}
	s.log.Warn("orders answered OK and not yet read by any order writer exceed what this node keeps; the oldest rely on redis alone",
		"dropped", dropped, "kept", s.orders)
}

// Orders is how many orders the node keeps now.
func (s *SoldShadow) Orders() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orders
}

// Run checks the kept orders and reports the lease row every ShadowEvery
// until ctx ends, then removes the row.
func (s *SoldShadow) Run(ctx context.Context) {
	t := time.NewTicker(ShadowEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if err := s.rows.Release(rctx, s.consumer); err != nil {
				s.log.Warn("could not release the sellers' lease row; reloads wait for it until it lapses", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
		s.Step(ctx)
	}
}

// Step does one round: checks the kept orders against Redis, then reports
// the lease row.
func (s *SoldShadow) Step(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.check(cctx); err != nil {
		s.log.DebugContext(ctx, "kept orders not checked", "err", err)
	}
	if err := s.report(cctx); err != nil {
		s.log.DebugContext(ctx, "sellers' lease row not refreshed", "err", err)
	}
}

// check drops the batches the writers have read and appends again those
// whose load or log Redis lost.
func (s *SoldShadow) check(ctx context.Context) error {
	s.mu.Lock()
	ids := make([]int64, 0, len(s.vouchers))
	for id, bs := range s.vouchers {
		if len(bs) == 0 {
			delete(s.vouchers, id)
			continue
		}
		ids = append(ids, id)
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(ids))
	for i, id := range ids {
		cmds[i] = shadowCheckScript.Eval(ctx, pipe, []string{metaKey(id), LogKey(id)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("check kept orders: %w", err)
	}
	for i, id := range ids {
		res, err := cmds[i].StringSlice()
		if err != nil || len(res) != 3 {
			return fmt.Errorf("check kept orders of voucher %d: %v %w", id, res, err)
		}
		if err := s.settle(ctx, id, res[0], res[1], res[2]); err != nil {
			return err
		}
	}
	return nil
}

// settle applies one voucher's reading: the load Redis holds (stamp), the
// writers' position in its log (delivered, empty when the log is gone)
// and its oldest entry (first, empty when it holds none).
//
// A batch sold from the load Redis holds is done once a writer has read
// past it: the writer holds it then, and a reload waits for the writer.
// A batch appended again is done only once it is gone from the log
// (stored, or dead-lettered): a writer reads it after the reload began,
// so the writer's row cannot stand for it, and the reload's hold must
// last until the writer has returned it to the stock.
func (s *SoldShadow) settle(ctx context.Context, id int64, stamp, delivered, first string) error {
	if stamp == "" {
		return nil // no load yet: the reload comes first, and holds
	}
	s.mu.Lock()
	var lost []*shadowBatch
	kept := s.vouchers[id][:0]
	for _, b := range s.vouchers[id] {
		switch {
		case b.load != stamp || delivered == "":
			lost = append(lost, b)
		case b.stamp == b.load && !streamIDAfter(b.entry, delivered),
			b.stamp != b.load && (first == "" || streamIDAfter(first, b.entry)):
			s.orders -= len(b.orders)
			continue
		}
		kept = append(kept, b)
	}
	s.vouchers[id] = kept
	s.mu.Unlock()
	if len(lost) == 0 {
		return nil
	}
	const fields = 14
	args := []any{stamp, fields}
	n := 0
	for _, b := range lost {
		for _, o := range b.orders {
			args = append(args, EntryOrderID, o.OrderID, EntryUserID, o.UserID, EntryRequestID, o.RequestID,
				EntryVoucherID, id, EntryTime, b.at, EntrySlot, b.slot, EntryLoadStamp, b.stamp)
			n++
		}
	}
	last, err := shadowAppendScript.Run(ctx, s.rdb, []string{metaKey(id), LogKey(id)}, args...).Text()
	if err != nil {
		return fmt.Errorf("append kept orders of voucher %d again: %w", id, err)
	}
	if last == "" {
		return nil // another load by now: the next round looks again
	}
	if err := registerLog(ctx, s.rdb, LogKey(id)); err != nil {
		return err
	}
	s.mu.Lock()
	for _, b := range lost {
		b.load, b.entry = stamp, last
	}
	s.mu.Unlock()
	shadowAppended.Add(float64(n))
	s.log.WarnContext(ctx, "redis lost orders answered OK that no order writer had read; appended them to the order log again from this node's copy",
		"voucher", id, "orders", n)
	return nil
}

// report refreshes the node's lease row. Its clean_at moves to the
// database time of the previous report when every batch added before that
// report's answer came has been read by a writer: such a batch was added
// before the time the previous report read, so none older is left.
func (s *SoldShadow) report(ctx context.Context) error {
	s.mu.Lock()
	clean := !s.lastAnswer.IsZero()
	for _, bs := range s.vouchers {
		for _, b := range bs {
			if b.added.Before(s.lastAnswer) {
				clean = false
			}
		}
	}
	cleanAt := s.lastDB
	s.mu.Unlock()
	now, err := s.rows.ReportSince(ctx, s.consumer, clean, cleanAt)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.lastDB, s.lastAnswer = now, time.Now()
	s.mu.Unlock()
	return nil
}

// streamIDAfter reports whether stream id a comes after b ("ms-seq").
func streamIDAfter(a, b string) bool {
	am, as := splitStreamID(a)
	bm, bs := splitStreamID(b)
	return am > bm || am == bm && as > bs
}

func splitStreamID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}
