package persistence_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/internal/testenv"
)

// BenchmarkGrabAcknowledgedLoad measures what REDIS_ACK_REPLICAS=0, 1 and
// 2 cost under concurrent batches, against a primary with two synced
// replicas on this machine (real processes, as a Sentinel set's data
// servers): ackLoadWorkers batches of ackLoadBatch grabs in flight, as a
// node's voucher actors send them. It reports grabs/s, the batches' p99,
// the benchmark process's CPU per grab and the three redis-servers' CPU
// per grab (INFO cpu); compare each with acks=0 of the same run.
//
//	nice go test -run '^$' -bench BenchmarkGrabAcknowledgedLoad -benchtime 2000x -count 3 ./persistence/
func BenchmarkGrabAcknowledgedLoad(b *testing.B) {
	primary := testenv.MustRedis(b)
	servers := []*testenv.RedisServer{primary, testenv.MustReplica(b, primary), testenv.MustReplica(b, primary)}
	db := testenv.MustPostgres(b)
	ids := testenv.MustOrderIDs(b, db)
	ctx := context.Background()
	var user atomic.Int64
	for _, acks := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("acks=%d", acks), func(b *testing.B) {
			g, v, fence, batches := ackBenchSale(b, primary, db, ids, acks, ackLoadBatch, &user)
			took := make([]time.Duration, b.N)
			var next atomic.Int64
			var failed atomic.Value
			redisBefore, selfBefore := serversCPU(b, servers), selfCPU(b)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range ackLoadWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
						cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
						began := time.Now()
						out, err := g.Grab(cctx, v.ID, 0, fence, batches[i])
						took[i] = time.Since(began)
						cancel()
						if err != nil || out.Results[ackLoadBatch-1].Code != domain.SeckillOK {
							failed.Store(fmt.Sprintf("batch %d: %v %v", i, codes(out), err))
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if f := failed.Load(); f != nil {
				b.Fatal(f)
			}
			grabsDone := float64(b.N * ackLoadBatch)
			slices.Sort(took)
			b.ReportMetric(grabsDone/b.Elapsed().Seconds(), "grabs/s")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64((selfCPU(b)-selfBefore).Microseconds())/grabsDone, "bench-cpu-µs/grab")
			b.ReportMetric(float64((serversCPU(b, servers)-redisBefore).Microseconds())/grabsDone, "redis-cpu-µs/grab")
		})
	}
}

const (
	ackLoadWorkers = 8
	ackLoadBatch   = 20
)

// serversCPU is the servers' CPU time so far (redisCPU of each).
func serversCPU(tb testing.TB, servers []*testenv.RedisServer) time.Duration {
	tb.Helper()
	var total time.Duration
	for _, s := range servers {
		total += redisCPU(tb, s.Client())
	}
	return total
}
