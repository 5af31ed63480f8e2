package graph

import (
	"context"
	"time"

	"flashsale/domain"
	"flashsale/graph/model"
	"flashsale/internal/auth"
)

// RedPackets serves the red-packet fields (implemented by
// redpackets.Service); nil answers NOT_IMPLEMENTED. Grab outcomes are
// codes, never errors.
type RedPackets interface {
	Create(ctx context.Context, in domain.NewRedPacket) (domain.RedPacket, error)
	Get(ctx context.Context, id int64) (domain.RedPacket, error)
	Grab(ctx context.Context, id, userID int64, requestID string) domain.RedPacketResult
}

// createRedPacket: any signed-in user creates a red packet of their own.
func (r *Resolver) createRedPacket(ctx context.Context, in model.CreateRedPacketInput) (*model.RedPacket, error) {
	if r.RedPackets == nil {
		return nil, notImplemented("createRedPacket")
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	expiry := domain.RedPacketDefaultExpiry
	if in.ExpiresInSeconds != nil {
		// Checked here, as given: a duration would wrap a huge value
		// around, and the message must quote what the client sent.
		maxSeconds := int(domain.RedPacketMaxExpiry / time.Second)
		if s := *in.ExpiresInSeconds; s < 1 || s > maxSeconds {
			return nil, domain.InvalidField("expiresInSeconds", "must be 1 .. %d seconds, got %d", maxSeconds, s)
		}
		expiry = time.Duration(*in.ExpiresInSeconds) * time.Second
	}
	rp, err := r.RedPackets.Create(ctx, domain.NewRedPacket{CreatorID: id.UserID, TotalCents: int64(in.TotalCents), Count: in.Count, Expiry: expiry})
	if err != nil {
		return nil, err
	}
	return redPacketToModel(rp), nil
}

// grabRedPacket grabs a packet for the caller.
func (r *Resolver) grabRedPacket(ctx context.Context, id int64, requestID *string) (*model.GrabRedPacketResult, error) {
	if r.RedPackets == nil {
		return nil, notImplemented("grabRedPacket")
	}
	req, err := grabRequest(ctx, id, requestID) // the same caller and key checks as seckillVoucher
	if err != nil {
		return nil, err
	}
	res := r.RedPackets.Grab(ctx, id, req.UserID, req.RequestID)
	out := &model.GrabRedPacketResult{Code: model.GrabCode(res.Code), Message: res.Code.Message()}
	if res.Code == domain.RedPacketOK || res.Code == domain.RedPacketAlreadyGrabbed {
		amount := int(res.AmountCents)
		out.AmountCents = &amount
	}
	return out, nil
}

// redPacket reads a red packet; an unknown id is NOT_FOUND, as for voucher.
func (r *Resolver) redPacket(ctx context.Context, id int64) (*model.RedPacket, error) {
	if r.RedPackets == nil {
		return nil, notImplemented("redPacket")
	}
	rp, err := r.RedPackets.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return redPacketToModel(rp), nil
}

func redPacketToModel(rp domain.RedPacket) *model.RedPacket {
	return &model.RedPacket{
		ID: rp.ID, CreatorID: rp.CreatorID, TotalCents: int(rp.TotalCents), Count: rp.Count,
		RemainingCount: rp.RemainingCount, RemainingCents: int(rp.RemainingCents), ExpiresAt: rp.ExpiresAt,
	}
}
