package graph

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"

	"flashsale/domain"
	"flashsale/graph/model"
	"flashsale/internal/auth"
)

// Conversions between the domain and the GraphQL models. Resolvers call
// these so that they stay one call and one mapping long.

var voucherTypes = map[model.VoucherType]domain.VoucherType{
	model.VoucherTypeNormal:  domain.VoucherNormal,
	model.VoucherTypeSeckill: domain.VoucherSeckill,
}

var voucherStatuses = map[domain.VoucherStatus]model.VoucherStatus{
	domain.StatusActive: model.VoucherStatusActive,
	domain.StatusPaused: model.VoucherStatusPaused,
	domain.StatusEnded:  model.VoucherStatusEnded,
}

func statusFromModel(s model.VoucherStatus) domain.VoucherStatus {
	for d, m := range voucherStatuses {
		if m == s {
			return d
		}
	}
	return 0
}

func newVoucherFromModel(in model.CreateVoucherInput) domain.NewVoucher {
	t, ok := voucherTypes[in.Type]
	if !ok {
		t = -1
	}
	return domain.NewVoucher{
		ShopID:       in.ShopID,
		Title:        in.Title,
		SubTitle:     in.SubTitle,
		Rules:        in.Rules,
		PayValue:     int64(in.PayValue),
		ActualValue:  int64(in.ActualValue),
		Type:         t,
		Stock:        in.Stock,
		BeginAt:      in.BeginAt,
		EndAt:        in.EndAt,
		PerUserLimit: in.PerUserLimit,
		Gate:         gateFromModel(in.RequireTicket, in.Challenge),
		Segments:     in.Segments,
		Room:         roomFromModel(in.WaitingRoom, in.AdmitPerSecond, in.MaxActive),
	}
}

func gateFromModel(requireTicket *bool, challenge *model.ChallengeKind) domain.Gate {
	var g domain.Gate
	if requireTicket != nil {
		g.RequireTicket = *requireTicket
	}
	if challenge != nil {
		g.Challenge = challengeFromModel(*challenge)
	}
	return g
}

func voucherToModel(v domain.Voucher) *model.Voucher {
	out := &model.Voucher{
		ID:          v.ID,
		ShopID:      v.ShopID,
		Title:       v.Title,
		SubTitle:    v.SubTitle,
		Rules:       v.Rules,
		PayValue:    int(v.PayValue),
		ActualValue: int(v.ActualValue),
		Type:        model.VoucherTypeNormal,
		Status:      voucherStatuses[v.Status],
		CreatedAt:   v.CreatedAt,
	}
	if sk := v.Seckill; sk != nil {
		out.Type = model.VoucherTypeSeckill
		out.Seckill = seckillInfoToModel(v.ID, *sk)
	}
	return out
}

// seckillInfoToModel is a voucher's seckill info; its id is the
// voucher's, so that every answer about one voucher's seckill names the
// same object in a client's normalized cache.
func seckillInfoToModel(voucherID int64, sk domain.Seckill) *model.SeckillInfo {
	out := &model.SeckillInfo{
		ID:            voucherID,
		InitialStock:  sk.InitialStock,
		Remaining:     sk.Remaining,
		BeginAt:       sk.BeginAt,
		EndAt:         sk.EndAt,
		PerUserLimit:  sk.PerUserLimit,
		Segments:      sk.Segments,
		RequireTicket: sk.Gate.RequireTicket,
		Challenge:     challengeToModel(sk.Gate.Challenge),
	}
	roomToModel(out, sk.Room)
	return out
}

func stockToModel(l domain.StockLevel) *model.StockUpdate {
	return &model.StockUpdate{
		ID:        l.VoucherID,
		VoucherID: l.VoucherID,
		Remaining: l.Remaining,
		Sold:      l.Sold(),
		SoldOut:   l.Remaining <= 0,
		At:        l.At,
	}
}

// Cursors are opaque to clients: base64 of "<kind>:<id>".

func encodeCursor(kind string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.FormatInt(id, 10)))
}

func decodeCursor(kind string, cursor *string) (int64, error) {
	if cursor == nil || *cursor == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(*cursor)
	if err == nil {
		if rest, ok := strings.CutPrefix(string(raw), kind+":"); ok {
			if id, err := strconv.ParseInt(rest, 10, 64); err == nil && id > 0 {
				return id, nil
			}
		}
	}
	return 0, domain.InvalidField("after", "not a cursor from this list")
}

func pageFromArgs(kind string, first *int, after *string) (domain.Page, error) {
	n := domain.DefaultPageSize
	if first != nil {
		n = *first
	}
	if n < 0 || n > domain.MaxPageSize {
		return domain.Page{}, domain.InvalidField("first", "must be between 0 and %d", domain.MaxPageSize)
	}
	id, err := decodeCursor(kind, after)
	if err != nil {
		return domain.Page{}, err
	}
	return domain.Page{First: n, After: id}, nil
}

func voucherConnection(vs []domain.Voucher, more bool) *model.VoucherConnection {
	conn := &model.VoucherConnection{Edges: make([]*model.VoucherEdge, len(vs)), PageInfo: &model.PageInfo{HasNextPage: more}}
	for i, v := range vs {
		c := encodeCursor("voucher", v.ID)
		conn.Edges[i] = &model.VoucherEdge{Cursor: c, Node: voucherToModel(v)}
		conn.PageInfo.EndCursor = &c
	}
	return conn
}

// notImplemented answers the contract fields that a later release owns.
func notImplemented(field string) error {
	return domain.Errorf(domain.CodeNotImplemented, "%s is not implemented yet", field)
}

// Grab is the seckillVoucher field over the grab use case: the caller and
// the arguments as a grab request, the use case, its outcome as the
// schema's result. The resolver and the compiled grab path of the HTTP
// edge both answer with it, so both answer alike.
func Grab(ctx context.Context, grabs Seckill, voucherID int64, requestID, ticket *string) (*model.SeckillResult, error) {
	req, err := grabRequest(ctx, voucherID, requestID)
	if err != nil {
		return nil, err
	}
	var t string
	if ticket != nil {
		t = *ticket
	}
	res, err := grabs.Grab(ctx, req, t)
	if err != nil {
		return nil, err
	}
	return seckillToModel(res)
}

// grabRequest is the caller's grab: the user from the token (checked
// first, so an anonymous caller hears UNAUTHENTICATED whatever it sent)
// and the client's idempotency key, if any, checked.
func grabRequest(ctx context.Context, voucherID int64, requestID *string) (domain.GrabRequest, error) {
	id, err := auth.FromContext(ctx)
	if err != nil {
		return domain.GrabRequest{}, err
	}
	req := domain.GrabRequest{VoucherID: voucherID, UserID: id.UserID, ClientIP: auth.ClientIP(ctx)}
	if requestID != nil {
		if err := domain.CheckRequestID(*requestID); err != nil {
			return domain.GrabRequest{}, err
		}
		req.RequestID = *requestID
	}
	return req, nil
}

// seckillToModel maps a grab's outcome to the contract's two channels:
// business outcomes are data (SeckillCode); a rate-limited grab is a
// RATE_LIMITED error with its wait, because the contract names it an
// error code and its SeckillCode enum has no such value (a value added
// there would break clients generated from the contract).
func seckillToModel(res domain.GrabResult) (*model.SeckillResult, error) {
	if res.Code == domain.SeckillRateLimited {
		return nil, domain.RateLimited(res.RetryAfter)
	}
	out := &model.SeckillResult{Code: model.SeckillCode(res.Code), Message: res.Code.Message()}
	if res.Code == domain.SeckillOK {
		id := res.OrderID
		out.OrderID = &id
	}
	return out, nil
}
