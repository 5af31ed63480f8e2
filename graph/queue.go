package graph

import (
	"context"
	"math"

	"flashsale/domain"
	"flashsale/graph/model"
	"flashsale/internal/auth"
)

// Queue is the waiting rooms (implemented by queue.Service).
type Queue interface {
	Join(ctx context.Context, user int64, ip string, voucher int64, challenge, nonce string) (domain.QueuePlace, error)
	Place(ctx context.Context, user, voucher int64) (domain.QueuePlace, bool, error)
	SetWaitingRoom(ctx context.Context, voucher int64, change domain.RoomChange) (domain.Voucher, error)
	Subscribe(ctx context.Context, user, voucher int64, send func(domain.QueuePlace) bool, done func()) error
}

// queue is the rooms' service for a field that needs it.
func (r *Resolver) queue(name string) (Queue, error) {
	if r.Queue == nil {
		return nil, notImplemented(name)
	}
	return r.Queue, nil
}

func (r *Resolver) joinQueue(ctx context.Context, voucherID int64, challenge, nonce *string) (*model.QueuePlace, error) {
	q, err := r.queue("joinQueue")
	if err != nil {
		return nil, err
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	p, err := q.Join(ctx, id.UserID, auth.ClientIP(ctx), voucherID, deref(challenge), deref(nonce))
	if err != nil {
		return nil, err
	}
	return queuePlaceToModel(p), nil
}

func (r *Resolver) queuePlace(ctx context.Context, voucherID int64) (*model.QueuePlace, error) {
	q, err := r.queue("queuePlace")
	if err != nil {
		return nil, err
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	p, ok, err := q.Place(ctx, id.UserID, voucherID)
	if err != nil || !ok {
		return nil, err
	}
	return queuePlaceToModel(p), nil
}

func (r *Resolver) queueChanged(ctx context.Context, voucherID int64) (<-chan *model.QueuePlace, error) {
	q, err := r.queue("queueChanged")
	if err != nil {
		return nil, err
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	return follow(ctx, func(send func(domain.QueuePlace) bool, done func()) error {
		return q.Subscribe(ctx, id.UserID, voucherID, send, done)
	}, queuePlaceToModel)
}

func (r *Resolver) setWaitingRoom(ctx context.Context, voucherID int64, admitPerSecond, maxActive *int, paused *bool) (*model.Voucher, error) {
	q, err := r.queue("setWaitingRoom")
	if err != nil {
		return nil, err
	}
	v, err := q.SetWaitingRoom(ctx, voucherID, domain.RoomChange{AdmitPerSecond: admitPerSecond, MaxActive: maxActive, Paused: paused})
	if err != nil {
		return nil, err
	}
	return voucherToModel(v), nil
}

var queueStates = map[domain.QueueState]model.QueueState{
	domain.QueueEarly:    model.QueueStateEarly,
	domain.QueueWaiting:  model.QueueStateWaiting,
	domain.QueueAdmitted: model.QueueStateAdmitted,
	domain.QueueSoldOut:  model.QueueStateSoldOut,
	domain.QueueClosed:   model.QueueStateClosed,
}

func queuePlaceToModel(p domain.QueuePlace) *model.QueuePlace {
	out := &model.QueuePlace{VoucherID: p.VoucherID, State: queueStates[p.State], Waiting: p.Waiting}
	if p.Position > 0 {
		pos := p.Position
		out.Position = &pos
	}
	if p.HasEstimate {
		ms := int(min(p.EstimatedWait.Milliseconds(), math.MaxInt32))
		out.EstimatedWaitMs = &ms
	}
	if p.Ticket != "" {
		t, exp := p.Ticket, p.ExpiresAt
		out.Ticket, out.ExpiresAt = &t, &exp
	}
	return out
}

// roomFromModel is createVoucher's waiting room.
func roomFromModel(enabled *bool, admitPerSecond, maxActive *int) domain.WaitingRoom {
	var r domain.WaitingRoom
	if enabled != nil {
		r.Enabled = *enabled
	}
	if admitPerSecond != nil {
		r.AdmitPerSecond = *admitPerSecond
		if r.AdmitPerSecond == 0 {
			r.AdmitPerSecond = -1 // given as 0: refused by validation, not taken as the default
		}
	}
	if maxActive != nil {
		r.MaxActive = *maxActive
		if r.MaxActive == 0 {
			r.MaxActive = -1
		}
	}
	return r
}

// roomToModel fills a seckill info's waiting-room fields.
func roomToModel(out *model.SeckillInfo, r domain.WaitingRoom) {
	out.WaitingRoom = r.Enabled
	if r.Enabled {
		r = r.WithDefaults()
		rate, most, paused := r.AdmitPerSecond, r.MaxActive, r.Paused
		out.AdmitPerSecond, out.MaxActive, out.RoomPaused = &rate, &most, &paused
	}
}
