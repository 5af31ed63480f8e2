package persistence_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/bench/sale"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// BenchmarkOrderCosts measures the CPU one sold order costs the machine
// outside the service's request handling, as docs/BENCHMARKS.md uses it
// for the floor of an in-stock grab: the grab script's Redis CPU per grab
// at a rush's batch size, and the CPU per stored order of the order log's
// store, driven as the persistence actor drives it (drain, in the actor's
// batches of 500), in Redis (reading, acknowledging and deleting the
// log), in Postgres (the order, the live-order counter and the ledger
// row, batched) and in this process. Redis is a private redis-server with the append-only file on,
// as in the load tool's runs; Postgres is the test server, whose
// processes' CPU is read from /proc, so it must run on this machine and
// nothing else should use it meanwhile. One op is one order.
//
//	go test -run '^$' -bench BenchmarkOrderCosts -benchtime 20000x ./persistence/
func BenchmarkOrderCosts(b *testing.B) {
	db, srv := testenv.MustPostgres(b), testenv.MustRedis(b)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		b.Fatal(err)
	}
	const batch = 20 // about the script's batch size under a rush (docs/BENCHMARKS.md)
	var user int64
	b.Run("grab-script", func(b *testing.B) {
		v := testenv.MustVoucher(b, db, rdb, testenv.VoucherSpec{Stock: b.N, Limit: 1})
		g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(b, db)
		fence, _, err := g.Claim(ctx, v.ID, 0)
		if err != nil {
			b.Fatal(err)
		}
		r0 := redisCPU(b, rdb)
		b.ResetTimer()
		for left := b.N; left > 0; left -= batch {
			n := min(left, batch)
			users := make([]int64, n)
			for i := range users {
				user++
				users[i] = user
			}
			out, err := g.Grab(ctx, v.ID, 0, fence, testenv.Grabs(b, ids, users...))
			if err != nil {
				b.Fatal(err)
			}
			if out.Results[n-1].Code != domain.SeckillOK {
				b.Fatalf("grab answered %s", out.Results[n-1].Code)
			}
		}
		b.StopTimer()
		b.ReportMetric(perOp(redisCPU(b, rdb)-r0, b.N), "redis-µs/grab")
	})
	b.Run("order-writer", func(b *testing.B) {
		v := testenv.MustVoucher(b, db, rdb, testenv.VoucherSpec{Stock: b.N, Limit: 1})
		sold := testenv.Sell(b, db, rdb, v.ID, testenv.Users(int(user)+1, b.N))
		user += int64(b.N)
		if len(sold) != b.N {
			b.Fatalf("sold %d of %d", len(sold), b.N)
		}
		r0, p0, s0 := redisCPU(b, rdb), postgresCPU(b), selfCPU(b)
		b.ResetTimer()
		drain(b, persistence.NewOrderLogs(rdb), orderStore(db, rdb), writerBatch, 5*time.Minute)
		b.StopTimer()
		b.ReportMetric(perOp(redisCPU(b, rdb)-r0, b.N), "redis-µs/order")
		b.ReportMetric(perOp(postgresCPU(b)-p0, b.N), "postgres-µs/order")
		b.ReportMetric(perOp(selfCPU(b)-s0, b.N), "writer-µs/order")
		testenv.AssertPersisted(b, db, v, sold)
	})
}

func perOp(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / 1000 / float64(n) }

// redisCPU is the CPU time the Redis server has used (INFO cpu).
func redisCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// postgresCPU is the local Postgres server's CPU time (sale.PostgresCPU).
func postgresCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d, ok := sale.PostgresCPU()
	if !ok {
		tb.Skip("no local postgres process to measure")
	}
	return d
}

func selfCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := sale.CPUTime(os.Getpid())
	if err != nil {
		tb.Fatal(fmt.Errorf("own CPU time: %w", err))
	}
	return d
}
