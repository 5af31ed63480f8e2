package persistence

import (
	"fmt"
	"strconv"
	"time"

	"flashsale/domain"
)

// orderEntry is one order read from an order log, decoded.
type orderEntry struct {
	order orderRow
	// stamp is the load stamp of the Redis load the order was sold from
	// ("" for entries written before stamps existed).
	stamp string
}

// entryInt reads an integer field of an order-log entry (of a voucher or
// a red packet).
func entryInt(v map[string]any, k string) (int64, error) {
	s, _ := v[k].(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %s=%q", k, s)
	}
	return n, nil
}

// decodeOrderEntry reads an order-log entry's fields; now is the row's
// update time. An error means the entry is no order at all (malformed).
func decodeOrderEntry(v map[string]any, now time.Time) (orderEntry, error) {
	field := func(k string) (int64, error) { return entryInt(v, k) }
	var e orderEntry
	o := &e.order
	var err error
	var ms, slot int64
	if o.ID, err = field(EntryOrderID); err != nil {
		return e, err
	}
	if o.UserID, err = field(EntryUserID); err != nil {
		return e, err
	}
	if o.VoucherID, err = field(EntryVoucherID); err != nil {
		return e, err
	}
	if ms, err = field(EntryTime); err != nil {
		return e, err
	}
	if slot, err = field(EntrySlot); err != nil {
		return e, err
	}
	if slot > 0 {
		s := int(slot)
		o.Slot = &s
	}
	if r, _ := v[EntryRequestID].(string); r != "" {
		o.RequestID = &r
	}
	o.Status = domain.OrderUnpaid
	o.CreateTime = time.UnixMilli(ms).UTC()
	o.UpdateTime = now
	e.stamp, _ = v[EntryLoadStamp].(string)
	return e, nil
}

// sameOrder tells whether two rows are the same order: what a log entry
// fixes for good (user, voucher, the time the grab was accepted). Status,
// slot and update time change over an order's life, so a replay after a
// payment or cancellation still matches. Under one request id the time
// may differ: the grab script records one order id per request id, so
// two entries of one order id and one request id are one grab, and a
// node's copy of an order it answered a retry with (SoldShadow) carries
// the time of the batch that answered the retry, not the sale's.
func sameOrder(a, b orderRow) bool {
	if a.UserID != b.UserID || a.VoucherID != b.VoucherID {
		return false
	}
	return a.CreateTime.Equal(b.CreateTime) || (a.RequestID != nil && b.RequestID != nil && *a.RequestID != "" && *a.RequestID == *b.RequestID)
}

func describeOrder(o orderRow) string {
	return fmt.Sprintf("user %d, voucher %d, created %s", o.UserID, o.VoucherID, o.CreateTime.UTC().Format(time.RFC3339Nano))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// EntryOrder is the order id an order log's entry carries, if it holds a
// valid one.
func EntryOrder(e domain.LogEntry) (int64, bool) {
	s, _ := e.Values[EntryOrderID].(string)
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}
