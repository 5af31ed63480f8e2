package graph_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
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
		// One red packet of the most packets allowed per as many grabs,
		// each grab by a user of its own: every grab takes a packet.
		const per = domain.RedPacketMaxCount
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

// BenchmarkCreateRedPacket measures what an accepted createRedPacket
// costs, through the whole GraphQL handler against Postgres and a private
// redis-server: the service's CPU per create (getrusage, every thread of
// this process, so the garbage collection the create leaves behind and
// the idle writers' polling count too), its allocations, the Redis
// server's CPU and memory per create (INFO) and what the red-packet
// tables grew by in Postgres (pg_total_relation_size, tables and
// indexes). Each create has a creator of its own (the quota). The
// figures are in docs/BENCHMARKS.md.
//
//	go test -run '^$' -bench BenchmarkCreateRedPacket -benchtime 50x -count 5 ./graph/
func BenchmarkCreateRedPacket(b *testing.B) {
	s := newServer(b)
	creator := int64(1 << 41)
	for _, count := range []int{100, 1_000, domain.RedPacketMaxCount} {
		b.Run(fmt.Sprintf("packets=%d", count), func(b *testing.B) {
			b.ReportAllocs()
			tokens := make([]string, b.N)
			for i := range tokens {
				creator++
				tokens[i] = s.token(b, creator, auth.RoleUser)
			}
			vars := map[string]any{"in": map[string]any{"totalCents": 100 * count, "count": count, "expiresInSeconds": 3600}}
			runtime.GC()
			r0, m0, pg0 := redisCPU(b, s.rdb), redisMemory(b, s.rdb), redPacketTables(b, s.db)
			start := testenv.CPUTime(b)
			b.ResetTimer()
			for i := range b.N {
				var out struct{ CreateRedPacket redPacketData }
				s.mustDo(b, tokens[i], createRedPacketMutation, vars, &out)
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(testenv.CPUTime(b)-start)/float64(time.Millisecond)/n, "cpu-ms/op")
			b.ReportMetric(float64(redisCPU(b, s.rdb)-r0)/float64(time.Millisecond)/n, "redis-cpu-ms/op")
			b.ReportMetric((redisMemory(b, s.rdb)-m0)/1024/n, "redis-KB/op")
			b.ReportMetric(float64(redPacketTables(b, s.db)-pg0)/1024/n, "pg-KB/op")
		})
	}
}

// redPacketTables is the size of the red packets' tables and their
// indexes in Postgres, in bytes.
func redPacketTables(tb testing.TB, db *bun.DB) int64 {
	tb.Helper()
	var n int64
	err := db.NewRaw(`SELECT pg_total_relation_size('tb_red_packet') + pg_total_relation_size('tb_red_packet_part')
		+ pg_total_relation_size('tb_red_packet_open')`).Scan(context.Background(), &n)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// redisCPU is the CPU time the Redis server has used (INFO cpu).
func redisCPU(tb testing.TB, rdb *redis.Client) time.Duration {
	tb.Helper()
	return time.Duration(redisInfo(tb, rdb, "cpu", "used_cpu_sys", "used_cpu_user") * float64(time.Second))
}

// redisMemory is the memory the Redis server holds for data (INFO memory).
func redisMemory(tb testing.TB, rdb *redis.Client) float64 {
	tb.Helper()
	return redisInfo(tb, rdb, "memory", "used_memory")
}

// redisInfo sums the named fields of an INFO section.
func redisInfo(tb testing.TB, rdb *redis.Client, section string, fields ...string) float64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if slices.Contains(fields, k) {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}
