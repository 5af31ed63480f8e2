package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// deadLetters reads the orders the service dead-lettered for one voucher:
// rows of tb_order_dead_letter, durable across Redis losses.
type deadLetters struct {
	db      *sql.DB
	voucher int64

	mu   sync.Mutex
	seen []deadLetter
}

func newDeadLetters(db *sql.DB, voucher int64) *deadLetters {
	return &deadLetters{db: db, voucher: voucher}
}

// poll reads the voucher's dead letters.
func (d *deadLetters) poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT COALESCE(order_id, 0), COALESCE(user_id, 0), reason, COALESCE(load_stamp, '')
		FROM tb_order_dead_letter WHERE voucher_id = $1 ORDER BY key`, d.voucher)
	if err != nil {
		return fmt.Errorf("read dead letters: %w", err)
	}
	defer rows.Close()
	var seen []deadLetter
	for rows.Next() {
		var dl deadLetter
		if err := rows.Scan(&dl.order, &dl.user, &dl.reason, &dl.stamp); err != nil {
			return fmt.Errorf("read dead letters: %w", err)
		}
		seen = append(seen, dl)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read dead letters: %w", err)
	}
	d.mu.Lock()
	d.seen = seen
	d.mu.Unlock()
	return nil
}

// list is every dead letter of the voucher read by the last poll.
func (d *deadLetters) list() []deadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadLetter(nil), d.seen...)
}
