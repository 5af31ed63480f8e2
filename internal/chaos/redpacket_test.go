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
	for _, tc := range []struct {
		name    string
		durable bool
		answers []rpAnswer
		breakIt func(*rpState)
		want    string // "" for no violation
	}{
		{"a clean red packet", true, answers, func(*rpState) {}, ""},
		{"a packet of 0 cents", true, answers, func(s *rpState) { s.parts[2], s.parts[1] = 0, 5 }, "redpacket-split"},
		{"packets not summing to the total", true, answers, func(s *rpState) { s.total = 11 }, "redpacket-split"},
		{"an undrained log", true, answers, func(s *rpState) { s.logLeft = 2 }, "redpacket-drained"},
		{"a grab of a packet the split lacks", true, answers, func(s *rpState) { s.grabs[8] = rpGrab{seq: 1, amount: 4} }, "redpacket-grabs"},
		{"one packet held twice", true, answers, func(s *rpState) { s.grabs[8] = rpGrab{seq: 0, amount: 5} }, "redpacket-grabs"},
		{"redis and the database not adding up", true, answers, func(s *rpState) { *s.redisLeft = 2 }, "redpacket-conserved"},
		{"an OK lost", true, answers, func(s *rpState) { delete(s.grabs, 8); *s.redisLeft, *s.redisCents = 2, 5 }, "redpacket-lost"},
		{"an OK lost where Redis was wiped is allowed", false, answers, func(s *rpState) { delete(s.grabs, 8); *s.redisLeft, *s.redisCents = 2, 5 }, ""},
		{"two amounts told to one user", true, append(slices.Clone(answers), answer(7, "OK", 3)), func(*rpState) {}, "redpacket-answers"},
		{"a packet for a user only told no", true, answers, func(s *rpState) { s.grabs[9] = rpGrab{seq: 2, amount: 2}; *s.redisLeft, *s.redisCents = 0, 0 }, "redpacket-phantom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := clean()
			tc.breakIt(&st)
			var o outcome
			judgeRedPacket(&o, tc.durable, tc.answers, st)
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
