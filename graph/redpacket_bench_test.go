package graph_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/internal/auth"
)

// BenchmarkGrabKinds measures both kinds of sale through the whole
// GraphQL handler in one run (JWT, parsing, resolver, actor, one script
// call per batch, against a private redis-server, with both order-log
// writers running): a voucher grab while stock lasts, a red-packet grab
// while packets last (every grab a new user, so every one is OK), and a
// red-packet grab once it is empty (answered from memory). The figures
// are in docs/BENCHMARKS.md beside the seed's 25,000 grabs/s.
func BenchmarkGrabKinds(b *testing.B) {
	s := newServer(b)
	// run sends b.N operations from 32×GOMAXPROCS goroutines; vars gives
	// the i-th operation's variables, token its caller.
	run := func(b *testing.B, query string, token func(i int64) string, vars func(i int64) map[string]any, want string) {
		var next atomic.Int64
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1) - 1
				rec := s.post(token(i), query, vars(i))
				if !bytes.Contains(rec.Body.Bytes(), []byte(want)) {
					b.Errorf("answer %s, want %s", rec.Body.String(), want)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grabs/s")
	}
	// tokens issues one token per user up front (issuing is not what is
	// measured).
	tokens := func(b *testing.B, n int) func(i int64) string {
		out := make([]string, n)
		for i := range out {
			out[i], _ = s.tokens.Issue(auth.Identity{UserID: int64(i + 10), Role: auth.RoleUser}, time.Hour)
		}
		return func(i int64) string { return out[i%int64(n)] }
	}
	id := func(id string) func(int64) map[string]any {
		vars := map[string]any{"id": id}
		return func(int64) map[string]any { return vars }
	}

	b.Run("voucher/in-stock", func(b *testing.B) {
		in := seckillInput(1, 100_000_000)
		in["perUserLimit"] = 1000
		v := s.createVoucher(b, in)
		run(b, grabMutation, tokens(b, 4096), id(v.ID), `"OK"`)
	})
	creator := int64(1 << 40) // above every grabbing user's id
	b.Run("red-packet/in-packets", func(b *testing.B) {
		// One red packet of 10,000 packets per 10,000 grabs, each grab by
		// a user of its own: every grab takes a packet.
		const per = 10_000
		n := b.N/per + 1
		vars := make([]map[string]any, n)
		for k := range vars {
			// A creator of its own for each: one user may have only a
			// few open red packets (the quota), and each run adds some.
			creator++
			vars[k] = map[string]any{"id": s.createRedPacket(b, creator, 10*per, per, 3600).ID}
		}
		run(b, grabRedPacketMutation, tokens(b, b.N), func(i int64) map[string]any { return vars[i/per] }, `"OK"`)
	})
	b.Run("red-packet/empty", func(b *testing.B) {
		rp := s.createRedPacket(b, 1, 1, 1, 3600)
		last := s.grabRedPacket(b, s.token(b, 2, auth.RoleUser), rp.ID, "")
		if last.Code != "OK" {
			b.Fatalf("the only packet: %+v", last)
		}
		run(b, grabRedPacketMutation, tokens(b, 4096), id(rp.ID), `"EMPTY"`)
	})
}
