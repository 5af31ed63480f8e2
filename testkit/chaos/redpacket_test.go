package chaos

import (
	"slices"
	"testing"
)

// judgeRedPacket must fire on each broken promise it names and stay
// quiet on a clean red packet.
func TestJudgeRedPacketSeesEachBrokenPromise(t *testing.T) {
	clean := func() rpState {
		left, cents := int64(1), int64(2)
		return rpState{
			count: 3, total: 10,
			parts:     map[int]int64{0: 5, 1: 3, 2: 2},
			grabs:     map[int64]rpGrab{7: {seq: 0, amount: 5}, 8: {seq: 1, amount: 3}},
			redisLeft: &left, redisCents: &cents,
		}
	}
	answer := func(user int64, code string, amount int64) rpAnswer {
		return rpAnswer{attempt: attempt{user: user}, Code: code, Amount: amount}
	}
	answers := []rpAnswer{answer(7, "OK", 5), answer(8, "OK", 3), answer(7, "ALREADY_GRABBED", 5), answer(9, "EMPTY", 0)}
	// refunded: Redis dropped the expired red packet, and the refund
	// handed back the packet nobody grabbed.
	refunded := func(cents, count int64) func(*rpState) {
		return func(s *rpState) { s.redisLeft, s.redisCents, s.refundCents, s.refundCount = nil, nil, &cents, &count }
	}
	for _, tc := range []struct {
		name       string
		durable    bool
		wantRefund bool
		answers    []rpAnswer
		breakIt    func(*rpState)
		want       string // "" for no violation
	}{
		{"a clean red packet", true, false, answers, func(*rpState) {}, ""},
		{"a packet of 0 cents", true, false, answers, func(s *rpState) { s.parts[2], s.parts[1] = 0, 5 }, "redpacket-split"},
		{"packets not summing to the total", true, false, answers, func(s *rpState) { s.total = 11 }, "redpacket-split"},
		{"an undrained log", true, false, answers, func(s *rpState) { s.logLeft = 2 }, "redpacket-drained"},
		{"a grab of a packet the split lacks", true, false, answers, func(s *rpState) { s.grabs[8] = rpGrab{seq: 1, amount: 4} }, "redpacket-grabs"},
		{"one packet held twice", true, false, answers, func(s *rpState) { s.grabs[8] = rpGrab{seq: 0, amount: 5} }, "redpacket-grabs"},
		{"redis and the database not adding up", true, false, answers, func(s *rpState) { *s.redisLeft = 2 }, "redpacket-conserved"},
		{"an OK lost", true, false, answers, func(s *rpState) { delete(s.grabs, 8); *s.redisLeft, *s.redisCents = 2, 5 }, "redpacket-lost"},
		{"an OK lost where Redis was wiped is allowed", false, false, answers, func(s *rpState) { delete(s.grabs, 8); *s.redisLeft, *s.redisCents = 2, 5 }, ""},
		{"two amounts told to one user", true, false, append(slices.Clone(answers), answer(7, "OK", 3)), func(*rpState) {}, "redpacket-answers"},
		{"a packet for a user only told no", true, false, answers, func(s *rpState) { s.grabs[9] = rpGrab{seq: 2, amount: 2}; *s.redisLeft, *s.redisCents = 0, 0 }, "redpacket-phantom"},
		{"a refund of what nobody grabbed", true, true, answers, refunded(2, 1), ""},
		{"the same where Redis was wiped", false, true, answers, refunded(2, 1), ""},
		{"a refund that pays out a grabbed packet again", false, true, answers, refunded(4, 2), "redpacket-refund"},
		{"a grab committed after the refund", false, true, answers, func(s *rpState) {
			refunded(2, 1)(s)
			s.grabs[9] = rpGrab{seq: 2, amount: 2}
		}, "redpacket-refund"},
		{"no refund after the expiry", true, true, answers, func(s *rpState) { s.redisLeft, s.redisCents = nil, nil }, "redpacket-refund"},
		{"more packets grabbed than the red packet has", false, false, answers, func(s *rpState) {
			s.grabs[9], s.grabs[10] = rpGrab{seq: 2, amount: 2}, rpGrab{seq: 3, amount: 1}
			s.redisLeft, s.redisCents = nil, nil
		}, "redpacket-refund"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := clean()
			tc.breakIt(&st)
			var o outcome
			judgeRedPacket(&o, tc.durable, tc.wantRefund, tc.answers, st)
			var got []string
			for _, v := range o.violations {
				got = append(got, v.check)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violations %v on %s", o.violations, tc.name)
			case tc.want != "" && !slices.Contains(got, tc.want):
				t.Fatalf("got %v, want %s", o.violations, tc.want)
			}
		})
	}
}
