package graph

import (
	"encoding/base64"
	"strings"

	"flashsale/domain"
	"flashsale/graph/model"
)

// deadLetterPage reads the paging arguments of deadLetteredOrders: its
// cursor is the key of the last entry seen (base64 of "dead:<key>").
func deadLetterPage(first *int, after *string) (int, string, error) {
	n := domain.DefaultPageSize
	if first != nil {
		n = *first
	}
	if n < 0 || n > domain.MaxPageSize {
		return 0, "", domain.InvalidField("first", "must be between 0 and %d", domain.MaxPageSize)
	}
	if after == nil || *after == "" {
		return n, "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(*after)
	if key, ok := strings.CutPrefix(string(raw), "dead:"); err == nil && ok && key != "" {
		return n, key, nil
	}
	return 0, "", domain.InvalidField("after", "not a cursor from this list")
}

func deadLetterConnection(list []domain.DeadLetter, more bool) *model.DeadLetteredOrderConnection {
	conn := &model.DeadLetteredOrderConnection{Edges: make([]*model.DeadLetteredOrderEdge, len(list)), PageInfo: &model.PageInfo{HasNextPage: more}}
	for i, d := range list {
		c := base64.RawURLEncoding.EncodeToString([]byte("dead:" + d.Key))
		conn.Edges[i] = &model.DeadLetteredOrderEdge{Cursor: c, Node: &model.DeadLetteredOrder{
			Key: d.Key, OrderID: d.OrderID, UserID: d.UserID, VoucherID: d.VoucherID, RequestID: d.RequestID,
			Reason: d.Reason, Detail: d.Detail, At: d.At,
		}}
		conn.PageInfo.EndCursor = &c
	}
	return conn
}

func reconciliationToModel(r domain.Reconciliation) *model.Reconciliation {
	return &model.Reconciliation{
		VoucherID: r.VoucherID, InitialStock: r.Initial, Remaining: r.Remaining, Loaded: r.Loaded,
		LiveOrders: r.Live, InFlightOrders: r.InFlight, DeadLetteredOrders: r.DeadLettered,
		UsersOff: r.UsersOff, Balanced: r.Balanced(),
	}
}
