package seckill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/usecase/salestats"
	"flashsale/usecase/seckill"
)

// recordingRouter answers OK and records the grabs it was given.
type recordingRouter struct{ got []domain.GrabRequest }

func (r *recordingRouter) Grab(_ context.Context, req domain.GrabRequest) domain.GrabResult {
	r.got = append(r.got, req)
	return domain.GrabResult{Code: domain.SeckillOK, OrderID: 42}
}

// scriptedGate answers every grab with err, recording what it was asked.
type scriptedGate struct {
	err   error
	asked []string
}

func (g *scriptedGate) CheckGrab(_ context.Context, user int64, ip string, voucher int64, ticket string) error {
	g.asked = append(g.asked, ip+"/"+ticket)
	if user != 7 || voucher != 3 {
		return errors.New("the gate was asked about another grab")
	}
	return g.err
}

var req = domain.GrabRequest{VoucherID: 3, UserID: 7, ClientIP: "192.0.2.1", RequestID: "r-1"}

// A grab the gate refuses is its error and never reaches the router: the
// router would take a unit of stock for a bot.
func TestRefusedGrabNeverReachesTheRouter(t *testing.T) {
	router := &recordingRouter{}
	gate := &scriptedGate{err: domain.ErrForbidden}
	res, err := seckill.New(gate, router).Grab(context.Background(), req, "forged")
	if domain.ErrorCode(err) != domain.CodeForbidden || res != (domain.GrabResult{}) {
		t.Fatalf("got %+v, %v; want the gate's FORBIDDEN", res, err)
	}
	if len(router.got) != 0 {
		t.Fatalf("the router took %d refused grabs", len(router.got))
	}
	if len(gate.asked) != 1 || gate.asked[0] != "192.0.2.1/forged" {
		t.Fatalf("the gate was asked %v, want the caller's address and ticket once", gate.asked)
	}
}

// An unknown voucher and a gate that cannot be read are outcomes, as the
// router answers them, not errors; neither reaches the router.
func TestGateOutcomesAnswerAsTheRouterWould(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want domain.SeckillCode
	}{
		{domain.Errorf(domain.CodeNotFound, "no such voucher"), domain.SeckillNotFound},
		{domain.Errorf(domain.CodeUnavailable, "the gate is unavailable"), domain.SeckillUnavailable},
	} {
		router := &recordingRouter{}
		res, err := seckill.New(&scriptedGate{err: tc.err}, router).Grab(context.Background(), req, "")
		if err != nil || res.Code != tc.want {
			t.Fatalf("gate %v: got %+v, %v; want %s", tc.err, res, err, tc.want)
		}
		if len(router.got) != 0 {
			t.Fatalf("gate %v: the router was called", tc.err)
		}
	}
}

// A grab the gate lets through, or any grab without a gate, is the
// router's, with the request as given.
func TestAdmittedGrabIsTheRouters(t *testing.T) {
	for name, gate := range map[string]seckill.Gate{"gate": &scriptedGate{}, "no gate": nil} {
		router := &recordingRouter{}
		res, err := seckill.New(gate, router).Grab(context.Background(), req, "t")
		if err != nil || res.Code != domain.SeckillOK || res.OrderID != 42 {
			t.Fatalf("%s: got %+v, %v; want the router's OK", name, res, err)
		}
		if len(router.got) != 1 || router.got[0] != req {
			t.Fatalf("%s: the router got %+v, want %+v once", name, router.got, req)
		}
	}
}

// countingRecorder counts the grabs recorded.
type countingRecorder struct{ n int }

func (c *countingRecorder) Record(int64, int, time.Duration, time.Time) { c.n++ }

// Every grab answered, and every refusal of the gate, is recorded once.
func TestEveryGrabIsRecorded(t *testing.T) {
	rec := &countingRecorder{}
	s := seckill.New(&scriptedGate{err: domain.ErrForbidden}, &recordingRouter{}).WithRecorder(rec)
	s.Grab(context.Background(), req, "")
	seckill.New(nil, &recordingRouter{}).WithRecorder(rec).Grab(context.Background(), req, "")
	if rec.n != 2 {
		t.Fatalf("recorded %d grabs, want 2", rec.n)
	}
}

// BenchmarkGrabRecorded is the cost of counting a grab for the console:
// the use case over a router that answers at once, without and with the
// recorder, in one run.
func BenchmarkGrabRecorded(b *testing.B) {
	for _, tc := range []struct {
		name string
		rec  bool
	}{{"without", false}, {"with", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s := seckill.New(nil, &okRouter{})
			if tc.rec {
				s.WithRecorder(salestats.New(nil, nil, nil, salestats.Options{}))
			}
			ctx := context.Background()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s.Grab(ctx, req, "")
				}
			})
		})
	}
}

// okRouter answers OK and keeps nothing.
type okRouter struct{}

func (okRouter) Grab(context.Context, domain.GrabRequest) domain.GrabResult {
	return domain.GrabResult{Code: domain.SeckillOK}
}
