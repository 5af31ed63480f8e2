// Package seckill is the grab use case: the gate (tickets, blocklists)
// first, then the router that sequences the grab in its voucher's actor.
// Every front end that takes grabs (the GraphQL resolver, the compiled
// grab path of the HTTP edge) calls Service.Grab, so none can reach the
// router without passing the gate.
package seckill

import (
	"context"
	"time"

	"flashsale/domain"
)

// Gate refuses grabs against bots and scalpers (implemented by
// gate.Service). CheckGrab answers from memory, with no Redis call: an
// error is FORBIDDEN (refused, with why), NOT_FOUND for an id that is no
// seckill voucher, or UNAVAILABLE when the voucher's gate cannot be read.
type Gate interface {
	CheckGrab(ctx context.Context, user int64, ip string, voucher int64, ticket string) error
}

// Router takes one unit of a seckill voucher for a user (implemented by
// actors.Router). Outcomes are codes, never errors.
type Router interface {
	Grab(ctx context.Context, req domain.GrabRequest) domain.GrabResult
}

// Recorder counts every answered grab by voucher, answer (its index in
// domain.SaleCodes) and the time its caller waited (implemented by
// salestats.Service). It is on the grab's path: it must not block.
type Recorder interface {
	Record(voucher int64, code int, took time.Duration, now time.Time)
}

// Service is the grab use case.
type Service struct {
	gate   Gate // nil: every grab goes to the router
	router Router
	rec    Recorder // nil: grabs are not counted
}

// New returns the use case over a router, behind gate; a nil gate lets
// every grab through to the router (a node without the gate).
func New(gate Gate, router Router) *Service {
	return &Service{gate: gate, router: router}
}

// Grab runs the gate, then the router. A grab the gate refuses is the
// gate's error (FORBIDDEN) and never reaches the router; an unknown
// voucher and a gate that cannot be read are outcomes (NOT_FOUND,
// UNAVAILABLE), as the router answers them, so a client sees one answer
// whichever of the two found them.
func (s *Service) Grab(ctx context.Context, req domain.GrabRequest, ticket string) (domain.GrabResult, error) {
	if s.rec == nil {
		return s.grab(ctx, req, ticket)
	}
	start := time.Now()
	res, err := s.grab(ctx, req, ticket)
	code := domain.SaleCodeIndex(res.Code)
	if err != nil {
		code = domain.SaleCodeIndex(domain.SeckillUnavailable)
		if domain.ErrorCode(err) == domain.CodeForbidden {
			code = domain.SaleForbidden
		}
	}
	end := time.Now()
	s.rec.Record(req.VoucherID, code, end.Sub(start), end)
	return res, err
}

// WithRecorder returns s counting every grab it answers in rec.
func (s *Service) WithRecorder(rec Recorder) *Service {
	s.rec = rec
	return s
}

func (s *Service) grab(ctx context.Context, req domain.GrabRequest, ticket string) (domain.GrabResult, error) {
	if s.gate != nil {
		err := s.gate.CheckGrab(ctx, req.UserID, req.ClientIP, req.VoucherID, ticket)
		switch domain.ErrorCode(err) {
		case "":
		case domain.CodeUnavailable:
			return domain.GrabResult{Code: domain.SeckillUnavailable}, nil
		case domain.CodeNotFound:
			return domain.GrabResult{Code: domain.SeckillNotFound}, nil
		default:
			return domain.GrabResult{}, err
		}
	}
	return s.router.Grab(ctx, req), nil
}
