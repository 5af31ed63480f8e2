package persistence_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
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
	var user atomic.Int64
	for _, acks := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("acks=%d", acks), func(b *testing.B) {
			ackLoad(b, servers, db, ids, acks, nil, &user)
		})
	}
}

// BenchmarkGrabAcknowledgedAOF is BenchmarkGrabAcknowledgedLoad against
// servers that all run appendonly yes with appendfsync always, with WAIT
// and with WAITAOF (REDIS_ACK_AOF); it skips on a server without WAITAOF
// (TEST_REDIS_SERVER names a Redis 7.2 or later binary).
//
//	TEST_REDIS_SERVER=... nice go test -run '^$' -bench BenchmarkGrabAcknowledgedAOF -benchtime 1000x -count 3 ./persistence/
func BenchmarkGrabAcknowledgedAOF(b *testing.B) {
	primary, replica := aofReplicated(b)
	if version, ok := offersWaitAOF(b, primary); !ok {
		b.Skipf("redis-server %s has no WAITAOF (7.2 or later; TEST_REDIS_SERVER names another binary)", version)
	}
	servers := []*testenv.RedisServer{primary, replica, testenv.MustReplicaFlags(b, primary, "--appendonly", "yes", "--appendfsync", "always")}
	db := testenv.MustPostgres(b)
	ids := testenv.MustOrderIDs(b, db)
	var user atomic.Int64
	for _, acks := range []int{0, 1, 2} {
		for _, aof := range []bool{false, true} {
			if acks == 0 && aof {
				continue
			}
			b.Run(fmt.Sprintf("acks=%d/waitaof=%t", acks, aof), func(b *testing.B) {
				var learn *persistence.AOFAcks
				if aof {
					learn = &persistence.AOFAcks{}
				}
				ackLoad(b, servers, db, ids, acks, learn, &user)
			})
		}
	}
}

// ackLoad is one sub-benchmark of the two above: servers[0] the primary.
func ackLoad(b *testing.B, servers []*testenv.RedisServer, db *bun.DB, ids *persistence.OrderIDs, acks int, aof *persistence.AOFAcks, user *atomic.Int64) {
	ctx := context.Background()
	primary := servers[0]
	g, v, fence, batches := ackBenchSale(b, primary, db, ids, acks, ackLoadBatch, user)
	g.Acks.AOF = aof
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
