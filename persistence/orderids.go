package persistence

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// Order ids are 64-bit and positive:
//
//	second since 2023-01-01 (31 bits) << 32 | node (10 bits) << 22 | sequence (22 bits)
//
// A node is a slot of tb_order_id_node that one allocator leases at a
// time. Before it uses a second, the allocator writes a reservation of
// that second to its slot; a later owner of the slot starts strictly after
// the reservation it finds. So ids of different slots differ in the node
// bits, and the owners of one slot use disjoint ranges of seconds, whatever
// Redis loses, however often processes restart, and whichever way clocks
// go (docs/DECISIONS.md, "Order ids", has the whole argument).
//
// Node 0 is never leased: ids of the earlier Redis allocator
// (second << 32 | sequence, with sequences far below 2^22) all read as
// node 0, so no new id can equal one of them.
const (
	// orderIDEpoch is 2023-01-01T00:00:00Z, the seeds' order-id epoch.
	orderIDEpoch    = 1672531200
	orderIDSeqBits  = 22
	orderIDNodeBits = 10
	orderIDMaxSeq   = 1 << orderIDSeqBits
	orderIDMaxSec   = 1<<31 - 1
)

// ErrNoOrderIDs says the allocator holds no reserved second to hand out
// ids from: the database was unreachable for longer than a reservation
// lasts (or the clock jumped past it). Grabs fail (UNAVAILABLE) rather than
// use a second that a later owner of the slot might use again.
var ErrNoOrderIDs = errors.New("no order ids reserved")

// OrderIDOptions tunes the OrderIDs; zero values take defaults.
type OrderIDOptions struct {
	// Reserve is how far past the clock the allocator reserves seconds:
	// grabs go on this long while the database is unreachable.
	Reserve time.Duration
	// Renew is how often the reservation and the lease are renewed.
	Renew time.Duration
	// Lease is how long the slot stays with its owner without a renewal;
	// after that another process may take it over (its ids start after
	// the reservation, so a late renewal or a slow owner is harmless).
	Lease time.Duration
	// Clock tells the time; tests set it to turn clocks back.
	Clock func() time.Time
}

func (o OrderIDOptions) withDefaults() OrderIDOptions {
	o.Reserve = cmp.Or(o.Reserve, 30*time.Second)
	o.Renew = cmp.Or(o.Renew, o.Reserve/3)
	o.Lease = cmp.Or(o.Lease, o.Reserve)
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// orderIDNode is a tb_order_id_node row: which allocator holds the slot
// (owner, until lease_until_ms by the owner's clock) and the last second
// of ids that any owner of the slot may have used (reserved_until_sec,
// which only grows).
type orderIDNode struct {
	bun.BaseModel `bun:"table:tb_order_id_node"`

	Node             int64  `bun:"node,pk"`
	Owner            string `bun:"owner,notnull"`
	ReservedUntilSec int64  `bun:"reserved_until_sec,notnull"`
	LeaseUntilMs     int64  `bun:"lease_until_ms,notnull"`
}

// OrderIDs hands out unique, roughly time-ordered order ids from memory:
// a grab batch costs no round trip. Only leasing a node slot (Acquire) and
// renewing its reservation (Renew) touch the database. It is the claim of
// the slot's lease: a lease.Keeper renews it every RenewEvery, and at
// once when Wake says Take ran out of reserved seconds.
type OrderIDs struct {
	db   *bun.DB
	log  *slog.Logger
	opts OrderIDOptions

	mu sync.Mutex
	// node and owner name the lease; node is 0 before Acquire and after
	// Release. Only Acquire, Renew and Release change them.
	node  int64
	owner string
	// sec and seq are the next id; reserved is the last second the
	// database has recorded for this lease.
	sec, seq, reserved int64
	leaseUntil         time.Time

	kick chan struct{}
}

// NewOrderIDs returns an allocator; Acquire leases its node slot.
func NewOrderIDs(db *bun.DB, log *slog.Logger, opts OrderIDOptions) *OrderIDs {
	return &OrderIDs{db: db, log: log, opts: opts.withDefaults(), kick: make(chan struct{}, 1)}
}

// Acquire leases a node slot. Renew keeps it; without renewals it lapses
// after Lease.
func (o *OrderIDs) Acquire(ctx context.Context) error {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return o.acquire(actx)
}

// LeaseTTL is how long the slot stays ours without a renewal.
func (o *OrderIDs) LeaseTTL() time.Duration { return o.opts.Lease }

// RenewEvery is how often the slot's lease and reservation should be
// renewed.
func (o *OrderIDs) RenewEvery() time.Duration { return o.opts.Renew }

// Wake signals when Take ran out of reserved seconds: renew at once
// rather than at the next tick.
func (o *OrderIDs) Wake() <-chan struct{} { return o.kick }

// Release gives up the slot, so another process may take it at once. Its
// reservation shrinks to the last second used (no id will come from the
// rest), so the next owner starts near the clock rather than past seconds
// nobody used. Take fails afterwards.
func (o *OrderIDs) Release(ctx context.Context) error {
	o.mu.Lock()
	node, owner, used := o.node, o.owner, min(o.sec, o.reserved)
	o.node = 0
	o.mu.Unlock()
	if node == 0 {
		return nil
	}
	_, err := o.db.NewUpdate().Model((*orderIDNode)(nil)).Set("lease_until_ms = 0").Set("reserved_until_sec = ?", used).
		Where("node = ?", node).Where("owner = ?", owner).Where("reserved_until_sec >= ?", used).Exec(ctx)
	if err != nil {
		o.log.Warn("order-id node not released; it is free once its lease ends", "node", node, "err", err)
		return fmt.Errorf("release order-id node %d: %w", node, err)
	}
	return nil
}

// Take returns n fresh ids. It fails, wrapping ErrNoOrderIDs, when the ids
// would need a second past the reservation.
func (o *OrderIDs) Take(_ context.Context, n int) ([]int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.node == 0 {
		return nil, errors.New("take order ids: no node slot leased (before Acquire or after Release)")
	}
	if now := o.second(); now > o.sec { // never back: a clock turned back reuses nothing
		o.sec, o.seq = now, 0
	}
	out := make([]int64, 0, n)
	for len(out) < n {
		if o.seq == orderIDMaxSeq {
			o.sec, o.seq = o.sec+1, 0
		}
		if o.sec > o.reserved || o.sec > orderIDMaxSec {
			select { // renew now rather than at the next tick
			case o.kick <- struct{}{}:
			default:
			}
			return nil, fmt.Errorf("take order ids of node %d: second %d is past its reservation (%d, lease until %s): %w",
				o.node, o.sec, o.reserved, o.leaseUntil.Format(time.RFC3339), ErrNoOrderIDs)
		}
		for ; o.seq < orderIDMaxSeq && len(out) < n; o.seq++ {
			out = append(out, o.sec<<32|o.node<<orderIDSeqBits|o.seq)
		}
	}
	return out, nil
}

// orderIDNodeOf is the slot that allocated id.
func orderIDNodeOf(id int64) int64 { return id >> orderIDSeqBits & (1<<orderIDNodeBits - 1) }

// second is the clock's second since the epoch.
func (o *OrderIDs) second() int64 { return max(0, o.opts.Clock().Unix()-orderIDEpoch) }

func (o *OrderIDs) reserveSeconds() int64 {
	return int64((o.opts.Reserve + time.Second - 1) / time.Second)
}

// acquire leases a free slot: one whose lease ended, the one whose
// reservation lies furthest back first (its ids start nearest to now). The
// update is a compare-and-swap on everything read, so of several processes
// racing for a slot exactly one wins, and the winner starts after the
// reservation it read, which is the slot's last.
func (o *OrderIDs) acquire(ctx context.Context) error {
	owner := newOwner()
	for range 10 {
		var free []orderIDNode
		err := o.db.NewSelect().Model(&free).Where("lease_until_ms < ?", o.opts.Clock().UnixMilli()).
			Order("reserved_until_sec", "node").Limit(16).Scan(ctx)
		if err != nil {
			return fmt.Errorf("find a free order-id node: %w", err)
		}
		if len(free) == 0 {
			return fmt.Errorf("lease an order-id node: all %d nodes are leased", 1<<orderIDNodeBits-1)
		}
		for _, c := range free {
			start := max(c.ReservedUntilSec+1, o.second())
			reserved := start + o.reserveSeconds()
			leaseUntil := o.opts.Clock().Add(o.opts.Lease)
			res, err := o.db.NewUpdate().Model((*orderIDNode)(nil)).
				Set("owner = ?", owner).Set("reserved_until_sec = ?", reserved).Set("lease_until_ms = ?", leaseUntil.UnixMilli()).
				Where("node = ?", c.Node).Where("owner = ?", c.Owner).
				Where("reserved_until_sec = ?", c.ReservedUntilSec).Where("lease_until_ms = ?", c.LeaseUntilMs).
				Exec(ctx)
			if err != nil {
				return fmt.Errorf("lease order-id node %d: %w", c.Node, err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				continue // another process took it first
			}
			o.mu.Lock()
			o.node, o.owner, o.sec, o.seq, o.reserved, o.leaseUntil = c.Node, owner, start, 0, reserved, leaseUntil
			o.mu.Unlock()
			o.log.Info("order-id node leased", "node", c.Node, "from_second", start, "reserved_until_second", reserved)
			return nil
		}
	}
	return errors.New("lease an order-id node: every free node was taken by another process first")
}

// OtherLiveNodes counts the order-id slots other processes hold a live
// lease on: every node that sells from this database holds one.
func (o *OrderIDs) OtherLiveNodes(ctx context.Context) (int, error) {
	o.mu.Lock()
	owner := o.owner
	o.mu.Unlock()
	n, err := o.db.NewSelect().Model((*orderIDNode)(nil)).
		Where("lease_until_ms >= ?", o.opts.Clock().UnixMilli()).Where("owner <> ?", owner).Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("count the nodes holding order-id slots: %w", err)
	}
	return int(n), nil
}

// Renew writes a reservation Reserve past the clock (never less than the
// one recorded) and extends the lease, while this allocator still owns the
// slot. A slot that another process took over (our lease had lapsed) is
// given up for a new one; until that is leased, Take goes on within the
// reservation already recorded, which the new owner of the old slot starts
// after.
func (o *OrderIDs) Renew(ctx context.Context) error {
	o.mu.Lock()
	node, owner, sec, reserved := o.node, o.owner, o.sec, o.reserved
	o.mu.Unlock()
	if node == 0 {
		return errors.New("renew order-id node: released")
	}
	next := max(reserved, max(o.second(), sec)+o.reserveSeconds())
	leaseUntil := o.opts.Clock().Add(o.opts.Lease)
	res, err := o.db.NewUpdate().Model((*orderIDNode)(nil)).
		Set("reserved_until_sec = ?", next).Set("lease_until_ms = ?", leaseUntil.UnixMilli()).
		Where("node = ?", node).Where("owner = ?", owner).Where("reserved_until_sec <= ?", next).
		Exec(ctx)
	if err != nil {
		return fmt.Errorf("renew order-id node %d: %w", node, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		o.log.Warn("order-id node taken over by another process after our lease lapsed; leasing another", "node", node)
		return o.acquire(ctx)
	}
	o.mu.Lock()
	o.reserved, o.leaseUntil = next, leaseUntil
	o.mu.Unlock()
	return nil
}

// newOwner names a lease: the host and process, for an operator reading
// the table, and random bytes, so that no two leases share a name (a
// renewal delayed from an earlier lease of the same slot cannot match).
func newOwner() string {
	host, _ := os.Hostname()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}
