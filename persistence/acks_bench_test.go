package persistence_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// BenchmarkGrabAcknowledged measures what REDIS_ACK_REPLICAS costs a grab
// batch: the grab script alone, and the script with WAIT 1 behind it on
// the same connection, against a private primary with one replica on this
// machine (real processes). One op is one batch, sent one after another,
// so ns/op is a batch's latency; µs/grab divides it by the batch size.
//
//	go test -run '^$' -bench BenchmarkGrabAcknowledged -benchtime 3000x ./persistence/
func BenchmarkGrabAcknowledged(b *testing.B) {
	primary := testenv.MustRedis(b)
	testenv.MustReplica(b, primary)
	db := testenv.MustPostgres(b)
	ids := testenv.MustOrderIDs(b, db)
	ctx := context.Background()
	var user atomic.Int64
	for _, acks := range []int{0, 1} {
		for _, batch := range []int{1, 20} {
			b.Run(fmt.Sprintf("acks=%d/batch=%d", acks, batch), func(b *testing.B) {
				g, v, fence, batches := ackBenchSale(b, primary, db, ids, acks, batch, &user)
				b.ResetTimer()
				for i := range b.N {
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					out, err := g.Grab(cctx, v.ID, 0, fence, batches[i])
					cancel()
					if err != nil || out.Results[batch-1].Code != domain.SeckillOK {
						b.Fatalf("batch %d: %v %v", i, codes(out), err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/grab")
			})
		}
	}
}

// ackBenchSale claims a voucher of stock for b.N batches of batch grabs
// on primary, acknowledged by acks replicas, and makes the batches of
// users counted by user.
func ackBenchSale(b *testing.B, primary *testenv.RedisServer, db *bun.DB, ids *persistence.OrderIDs, acks, batch int, user *atomic.Int64) (*persistence.Grabs, domain.Voucher, int64, [][]domain.Grab) {
	b.Helper()
	rdb := ackClient(b, primary)
	v := testenv.MustVoucher(b, db, rdb, testenv.VoucherSpec{Stock: b.N * batch, Limit: 1})
	g := persistence.NewGrabs(rdb)
	g.Acks = persistence.Acks{Replicas: acks, Timeout: time.Second}
	fence, _, err := g.Claim(context.Background(), v.ID, 0)
	if err != nil {
		b.Fatal(err)
	}
	batches := make([][]domain.Grab, b.N)
	for i := range batches {
		users := make([]int64, batch)
		for j := range users {
			users[j] = user.Add(1)
		}
		batches[i] = testenv.Grabs(b, ids, users...)
	}
	return g, v, fence, batches
}
