package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
)

// Why an order-log entry was dead-lettered: tb_order_dead_letter.reason and
// the label of flashsale_orders_dead_total. Each one means Redis sold
// something the database proves cannot exist; reaching any of them is a
// fault that reconciliation reports.
const (
	DeadOverStock        = "over_stock"        // past the voucher's stock
	DeadOverUserLimit    = "over_user_limit"   // past the user's perUserLimit
	DeadIDCollision      = "id_collision"      // its order id belongs to another order
	DeadDuplicateRequest = "duplicate_request" // its request id already holds an order
	DeadLostLoad         = "lost_load"         // sold from a Redis load that was lost and could not be taken back
	DeadUnknownVoucher   = "unknown_voucher"   // no such seckill voucher
	DeadMalformed        = "malformed"         // not an order at all
	DeadRefused          = "refused"           // another constraint
)

// refusalText says in words what each guard refused (the database's own
// message, which names constraints and SQL, goes to the log only).
var refusalText = map[string]string{
	DeadOverStock:        "the voucher's stock is already taken by persisted orders",
	DeadOverUserLimit:    "the user already holds the voucher's limit of live orders",
	DeadDuplicateRequest: "its request id already holds another order",
	DeadUnknownVoucher:   "no such seckill voucher",
	DeadIDCollision:      "its order id already belongs to another order",
	DeadRefused:          "a database constraint refused it",
}

// refusalReason names the guard behind a constraint violation: a foreign
// key by its error code, the others by the constraint's name (see
// violation).
func refusalReason(err error) string {
	v, ok := violation(err)
	if !ok {
		return DeadRefused
	}
	if v.foreignKey {
		return DeadUnknownVoucher
	}
	name := strings.ToLower(v.constraint)
	switch {
	case strings.Contains(name, "request"):
		return DeadDuplicateRequest
	case strings.Contains(name, "voucher_user"), strings.Contains(name, "per_user_limit"),
		strings.Contains(name, "live"), strings.Contains(name, "slot"):
		return DeadOverUserLimit
	case strings.Contains(name, "stock"):
		return DeadOverStock
	case name == "tb_voucher_order_pkey", name == "tb_voucher_order.id":
		return DeadIDCollision
	}
	return DeadRefused
}

// refuse is an entry's refusal for reason, err saying what exactly.
func refuse(reason string, err error) *domain.Refusal {
	return &domain.Refusal{Reason: reason, Err: err}
}

// deadLetterRow is a tb_order_dead_letter row.
type deadLetterRow struct {
	bun.BaseModel `bun:"table:tb_order_dead_letter"`

	Key        string    `bun:"key,pk"`
	OrderID    *int64    `bun:"order_id"`
	UserID     *int64    `bun:"user_id"`
	VoucherID  *int64    `bun:"voucher_id"`
	RequestID  *string   `bun:"request_id"`
	LoadStamp  *string   `bun:"load_stamp"`
	Reason     string    `bun:"reason,notnull"`
	Detail     string    `bun:"detail,notnull"`
	Entry      string    `bun:"entry,notnull"`
	CreateTime time.Time `bun:"create_time,notnull"`
}

// insertDeadLetters records dead-lettered entries of any order log (a
// voucher's or a red packet's), each once by its key, and counts the new
// ones in flashsale_orders_dead_total.
func insertDeadLetters(ctx context.Context, db bun.IDB, rows []deadLetterRow) error {
	if len(rows) == 0 {
		return nil
	}
	var added []string
	err := db.NewInsert().Model(&rows).On("CONFLICT (key) DO NOTHING").Returning("key").Scan(ctx, &added)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("dead-letter %d entries: %w", len(rows), err)
	}
	fresh := make(map[string]bool, len(added))
	for _, k := range added {
		fresh[k] = true
	}
	for _, r := range rows {
		if fresh[r.Key] {
			ordersDead.WithLabelValues(r.Reason).Inc()
		}
	}
	return nil
}

// DeadLetters reads the dead-lettered orders.
type DeadLetters struct {
	db *bun.DB
}

// NewDeadLetters returns the dead-letter store over db.
func NewDeadLetters(db *bun.DB) *DeadLetters { return &DeadLetters{db: db} }

// List returns up to first dead-lettered orders after the key after ("" =
// from the start), of one voucher or of all, ordered by key (order log,
// then entry), and whether more follow.
func (s *DeadLetters) List(ctx context.Context, voucherID *int64, first int, after string) ([]domain.DeadLetter, bool, error) {
	var rows []deadLetterRow
	q := s.db.NewSelect().Model(&rows).Where("key > ?", after).Order("key ASC").Limit(int64(first) + 1)
	if voucherID != nil {
		q = q.Where("voucher_id = ?", *voucherID)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, false, fmt.Errorf("list dead-lettered orders: %w", err)
	}
	more := len(rows) > first
	if more {
		rows = rows[:first]
	}
	out := make([]domain.DeadLetter, len(rows))
	for i, r := range rows {
		out[i] = domain.DeadLetter{
			Key: r.Key, OrderID: r.OrderID, UserID: r.UserID, VoucherID: r.VoucherID, RequestID: r.RequestID,
			Reason: r.Reason, Detail: r.Detail, At: r.CreateTime.UTC(),
		}
	}
	return out, more, nil
}

// Count returns how many orders of a voucher were dead-lettered, from any
// load.
func (s *DeadLetters) Count(ctx context.Context, voucherID int64) (int64, error) {
	n, err := s.db.NewSelect().Model((*deadLetterRow)(nil)).Where("voucher_id = ?", voucherID).Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("count dead-lettered orders of voucher %d: %w", voucherID, err)
	}
	return n, nil
}
