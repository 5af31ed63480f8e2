package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// A red packet's packets go into Postgres as one array (unnest WITH
// ORDINALITY) and into SQLite as multi-row VALUES in chunks of 2,000.
// Both forms must store packet i with amounts[i] under seq i and nothing
// else: one packet, a red packet that crosses a chunk, the largest one,
// amounts from 1 cent to the most a red packet may hold.
func TestPacketInsertsAgreeAcrossForms(t *testing.T) {
	t.Parallel()
	db := testenv.MustPostgres(t)
	for i, amounts := range [][]int64{
		{domain.RedPacketMaxCents},
		splitFor(2_001, 7),
		splitFor(domain.RedPacketMaxCount, 11),
		append(slices.Repeat([]int64{1}, 99), domain.RedPacketMaxCents-99),
	} {
		var stored [2][]string
		for form, arrays := range []bool{false, true} {
			id := int64(100*i + form + 1)
			if err := persistence.InsertPackets(t.Context(), db, arrays, id, amounts); err != nil {
				t.Fatalf("red packet %d (arrays %v): %v", i, arrays, err)
			}
			var rows []persistence.PacketRow
			if err := db.NewSelect().Model(&rows).Where("red_packet_id = ?", id).Order("seq").Scan(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				stored[form] = append(stored[form], fmt.Sprintf("%d:%d", r.Seq, r.AmountCents))
			}
		}
		want := make([]string, len(amounts))
		for seq, a := range amounts {
			want[seq] = fmt.Sprintf("%d:%d", seq, a)
		}
		if !slices.Equal(stored[0], want) || !slices.Equal(stored[1], want) {
			t.Fatalf("red packet %d of %d packets: VALUES stored %s, arrays %s; want %s",
				i, len(amounts), head(stored[0]), head(stored[1]), head(want))
		}
	}
}

// splitFor splits count × 100 cents into count packets, seeded.
func splitFor(count int, seed uint64) []int64 {
	return domain.SplitRedPacket(int64(count)*100, count, rand.New(rand.NewPCG(seed, seed)))
}

// head is the first packets of a list, for a failure's message.
func head(s []string) string {
	return fmt.Sprintf("%d packets %v", len(s), s[:min(len(s), 4)])
}

// Load puts a red packet into Redis as the grab script reads it: the
// packets in the order given, the users who grabbed with their packets,
// the metadata (expiry, cents left, the reload's hold), and every key
// expiring redPacketKeep after the red packet. A new red packet given by
// its amounts gets its packets under seqs 0 .. n-1. The same on the
// embedded mode's miniredis.
func TestRedPacketLoadWritesWhatTheGrabScriptReads(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) { t.Parallel(); loadWritesWhatTheGrabScriptReads(t, testenv.MustRedis(t).Client()) })
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		loadWritesWhatTheGrabScriptReads(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	})
}

func loadWritesWhatTheGrabScriptReads(t *testing.T, rdb *redis.Client) {
	r := persistence.NewRedPacketRedis(rdb)
	ctx := t.Context()
	expires := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	keep := expires.Add(24 * time.Hour)
	req := "req-1"
	reload := persistence.RedPacketLoad{ID: 1, ExpiresAt: expires, Hold: time.Minute,
		Packets: []persistence.PacketRow{{Seq: 3, AmountCents: 40}, {Seq: 1, AmountCents: 25}, {Seq: 4, AmountCents: 100_000_000}},
		Grabbed: []persistence.GrabRow{{Seq: 0, UserID: 11, AmountCents: 7, RequestID: &req}, {Seq: 2, UserID: 12, AmountCents: 8}}}
	created := persistence.RedPacketLoad{ID: 2, ExpiresAt: expires, Amounts: []int64{5, 1, 300}}
	for _, tc := range []struct {
		name    string
		load    persistence.RedPacketLoad
		packets []string
		users   map[string]string
		left    string
		hold    bool
	}{
		{"reload", reload, []string{"3:40", "1:25", "4:100000000"}, map[string]string{"11": "0:7:req-1", "12": "2:8:"}, "100000065", true},
		{"created", created, []string{"0:5", "1:1", "2:300"}, map[string]string{}, "306", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			if loaded, err := r.Load(ctx, tc.load); err != nil || !loaded {
				t.Fatalf("load: %v, %v", loaded, err)
			}
			tag := fmt.Sprintf("{rp%d}", tc.load.ID)
			packets, _ := rdb.LRange(ctx, tag+":packets", 0, -1).Result()
			users, _ := rdb.HGetAll(ctx, tag+":users").Result()
			meta, _ := rdb.HGetAll(ctx, tag+":meta").Result()
			if !slices.Equal(packets, tc.packets) || fmt.Sprint(users) != fmt.Sprint(tc.users) {
				t.Fatalf("packets %q, users %v; want %q, %v", packets, users, tc.packets, tc.users)
			}
			if meta["expire"] != fmt.Sprint(expires.UnixMilli()) || meta["left"] != tc.left {
				t.Fatalf("meta %v, want expire %d, left %s", meta, expires.UnixMilli(), tc.left)
			}
			hold, _ := strconv.ParseInt(meta["hold"], 10, 64)
			if from, to := began.Add(time.Minute-time.Second).UnixMilli(), time.Now().Add(time.Minute+time.Second).UnixMilli(); (meta["hold"] != "") != tc.hold || (tc.hold && (hold < from || hold > to)) {
				t.Fatalf("hold %q, want one a minute from the load: %v", meta["hold"], tc.hold)
			}
			keys := []string{tag + ":meta", tag + ":packets"}
			if len(tc.users) > 0 {
				keys = append(keys, tag+":users")
			}
			// Within a second: miniredis keeps an expiry as a TTL from its
			// clock, so the time the test takes between the load and this
			// read (tens of ms on a loaded machine) shows up here.
			for _, k := range keys {
				if at, err := rdb.PExpireTime(ctx, k).Result(); err != nil || (at-time.Duration(keep.UnixMilli())*time.Millisecond).Abs() > time.Second {
					t.Fatalf("%s expires at %d ms (%v), want %d ms", k, at.Milliseconds(), err, keep.UnixMilli())
				}
			}
			// A second load of a red packet Redis has changes nothing.
			again := tc.load
			again.Amounts, again.Packets = []int64{9}, nil
			if loaded, err := r.Load(ctx, again); err != nil || loaded {
				t.Fatalf("second load: %v, %v; want not loaded", loaded, err)
			}
			if n, _ := rdb.LLen(ctx, tag+":packets").Result(); n != int64(len(tc.packets)) {
				t.Fatalf("after a second load: %d packets, want %d", n, len(tc.packets))
			}
		})
	}
}

// Two loads of one red packet at once (a create's, and a grab's reload of
// the red packet it has just committed) load it once: the one whose
// check came first but whose writes came second adds nothing.
func TestRedPacketLoadRacingAnotherLoadsItOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.MustRedis(t)
	rdb, other := srv.Client(), srv.Client()
	ctx := t.Context()
	expires := time.Now().Add(time.Hour)
	// Another red packet's load first, so that the check's script is
	// loaded and its first call is the check itself.
	if _, err := persistence.NewRedPacketRedis(rdb).Load(ctx, persistence.RedPacketLoad{ID: 6, ExpiresAt: expires, Amounts: []int64{1}}); err != nil {
		t.Fatal(err)
	}
	// The other load runs right after this one checked that Redis lacks
	// the red packet, before it writes.
	var otherErr error
	rdb.AddHook(afterFirst("evalsha", func() {
		_, otherErr = persistence.NewRedPacketRedis(other).Load(context.Background(), persistence.RedPacketLoad{ID: 5, ExpiresAt: expires, Amounts: []int64{7, 8}})
	}))
	loaded, err := persistence.NewRedPacketRedis(rdb).Load(ctx, persistence.RedPacketLoad{ID: 5, ExpiresAt: expires, Amounts: []int64{1, 2, 3}})
	if err != nil || otherErr != nil {
		t.Fatal(errors.Join(err, otherErr))
	}
	packets, _ := rdb.LRange(ctx, "{rp5}:packets", 0, -1).Result()
	left, _ := rdb.HGet(ctx, "{rp5}:meta", "left").Result()
	if loaded || strings.Join(packets, " ") != "0:7 1:8" || left != "15" {
		t.Fatalf("loaded %v, packets %q, left %s; want not loaded, the other load's 0:7 1:8 and 15 cents", loaded, packets, left)
	}
}

// afterFirst is a go-redis hook that calls f once, after the first
// command named name.
func afterFirst(name string, f func()) redis.Hook {
	return &onceHook{name: name, f: f}
}

type onceHook struct {
	name string
	f    func()
	done bool
}

func (h *onceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *onceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == h.name && !h.done {
			h.done = true
			h.f()
		}
		return err
	}
}

func (h *onceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
