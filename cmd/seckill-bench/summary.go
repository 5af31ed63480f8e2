package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"flashsale/bench/sale"
)

func printSummary(w io.Writer, reps []*sale.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tscenario\tround\trequests\trps\tp50\tp90\tp99\tmax\tcpu/req\tbench cpu/req\tredis cpu/req\tdb cpu/req\tmachine cpu/req\tredis cmds/req\tdb lag\tdurable/s\tchecks")
	for _, r := range reps {
		checks := "ok"
		if len(r.Violations) > 0 {
			checks = fmt.Sprintf("%d VIOLATIONS", len(r.Violations))
		}
		durable := "-"
		if d, ok := r.DurablePerSecond(); ok {
			durable = fmt.Sprintf("%.0f", d)
		}
		round := "-"
		if r.Round > 0 {
			round = fmt.Sprint(r.Round)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Target, r.Scenario, round, r.Requests, r.RPS,
			ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99), ms(r.Latency.Max),
			us(r.CPUPerRequest), us(r.GeneratorCPUPerRequest), us(r.RedisCPUPerRequest), us(r.DBCPUPerRequest), us(r.MachineCPUPerRequest), num(r.RedisCommandsPerRequest), sec(r.DBLag), durable, checks)
	}
	tw.Flush()
	for _, r := range reps {
		codes := make([]string, len(r.Codes))
		for i, c := range r.Codes {
			codes[i] = fmt.Sprintf("%s %d", c.Code, c.Count)
		}
		fmt.Fprintf(w, "\n%s %s: sale %s, %d users x %d, stock %d: %s", r.Target, r.Scenario, r.SaleID, r.Users, r.Attempts, r.Expect.Stock, strings.Join(codes, ", "))
		if r.Remaining != nil {
			fmt.Fprintf(w, "; stock query %d", *r.Remaining)
		}
		if r.Rows != nil {
			fmt.Fprintf(w, "; %d rows in Postgres", *r.Rows)
		}
		if r.RSSBytes > 0 {
			fmt.Fprintf(w, "; RSS after %.0f MB", float64(r.RSSBytes)/(1<<20))
		}
		fmt.Fprintln(w)
		if len(r.RedisCommands) > 0 {
			cmds := make([]string, len(r.RedisCommands))
			for i, c := range r.RedisCommands {
				cmds[i] = fmt.Sprintf("%s %.3f", c.Command, c.PerRequest)
			}
			fmt.Fprintln(w, "  redis calls per request (scripts' inner calls included):", strings.Join(cmds, ", "))
		}
		if r.Queue != nil {
			printQueue(w, r)
		}
		for _, n := range r.Notes {
			fmt.Fprintln(w, "  note:", n)
		}
		for _, v := range r.Violations {
			fmt.Fprintln(w, "  VIOLATION", v)
		}
	}
	if rs := ratios(reps); len(rs) > 0 {
		fmt.Fprintln(w, "\nratios (same run):")
		for _, r := range rs {
			fmt.Fprintln(w, " ", r)
		}
	}
}

// printQueue prints a waiting-room sale's own figures.
func printQueue(w io.Writer, r *sale.Report) {
	q := r.Queue
	fmt.Fprintf(w, "  waiting room: %d early + %d late users; %d joins answered EARLY, %d early users joined after the opening; join p50 %s, p99 %s\n",
		q.Early, q.Late, q.JoinedEarly, q.EarlyMissed, ms(q.JoinLatency.P50), ms(q.JoinLatency.P99))
	if q.Admitted != nil {
		fmt.Fprintf(w, "  admitted %d (early %d, late %d) at %.1f/s first to last (pace %d/s); most tickets open at once %d (maxActive %d; a lower bound)\n",
			*q.Admitted, q.AdmittedEarly, q.AdmittedLate, q.AdmitRate, q.AdmitPerSecond, q.MostOpen, q.MaxActive)
		fmt.Fprintf(w, "  join to admission (an early user's from the opening): p50 %s, p99 %s, max %s\n", sec2(q.Wait.P50), sec2(q.Wait.P99), sec2(q.Wait.Max))
	}
	fmt.Fprintf(w, "  sold %d of %d", r.OK, r.Expect.Stock)
	if n := q.Notice; n.Timed > 0 || n.After > 0 {
		fmt.Fprintf(w, "; SOLD_OUT heard by %d subscribers waiting then, from the last OK grab's send: p50 %s, p99 %s, max %s (bound %s); %d subscribed after it",
			n.Timed, ms(n.Latency.P50), ms(n.Latency.P99), ms(n.Latency.Max), q.NoticeBound, n.After)
	}
	fmt.Fprintf(w, "\n  %d polls (%d failed%s), %d subscribers (%d fell back to polling), %d users unfinished at the deadline\n",
		q.Polls, q.PollErrors, codeList(q.PollErrorCodes), q.Subscribers, q.Fallbacks, q.Unfinished)
}

// codeList is ": CODE n, ..." by count, or nothing.
func codeList(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	codes := slices.Collect(maps.Keys(m))
	slices.SortFunc(codes, func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s %d", c, m[c])
	}
	return ": " + strings.Join(parts, ", ")
}

func sec2(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// ratios compares the service with each other target of the run (the
// reference designs, other named service nodes), per scenario and round,
// and the GraphQL ceiling with the plain one (what the contract's bytes
// alone cost); over several rounds it adds each pair's medians.
func ratios(reps []*sale.Report) []string {
	type pair struct{ scenario, num, den string }
	var (
		out    []string
		order  []pair
		rounds = map[pair][]ratio{}
	)
	compared := func(num, den string) bool {
		switch num {
		case "service":
			return den != "service"
		case "ceiling-graphql":
			return den == "ceiling"
		}
		return false
	}
	for _, s := range reps {
		for _, r := range reps {
			if r.Scenario != s.Scenario || r.Round != s.Round || !compared(s.Target, r.Target) || r.RPS == 0 {
				continue
			}
			rt := compare(s, r)
			name := s.Scenario
			if s.Round > 0 {
				name = fmt.Sprintf("%s round %d", s.Scenario, s.Round)
			}
			out = append(out, fmt.Sprintf("%s: %s/%s %s", name, s.Target, r.Target, rt))
			k := pair{s.Scenario, s.Target, r.Target}
			if rounds[k] == nil {
				order = append(order, k)
			}
			rounds[k] = append(rounds[k], rt)
		}
	}
	for _, k := range order {
		if rs := rounds[k]; len(rs) > 1 {
			out = append(out, fmt.Sprintf("%s: %s/%s median of %d rounds: %s", k.scenario, k.num, k.den, len(rs), medianRatio(rs)))
		}
	}
	return out
}

// ratio is the service's figures over another target's in one round; a
// figure that either side lacks is NaN.
type ratio struct{ rps, p99, cpu, machine, durable float64 }

func compare(s, r *sale.Report) ratio {
	rt := ratio{rps: s.RPS / r.RPS, p99: float64(s.Latency.P99) / float64(max(r.Latency.P99, 1)),
		cpu: math.NaN(), machine: math.NaN(), durable: math.NaN()}
	if s.CPUPerRequest != nil && r.CPUPerRequest != nil && *r.CPUPerRequest > 0 {
		rt.cpu = float64(*s.CPUPerRequest) / float64(*r.CPUPerRequest)
	}
	if s.MachineCPUPerRequest != nil && r.MachineCPUPerRequest != nil && *r.MachineCPUPerRequest > 0 {
		rt.machine = float64(*s.MachineCPUPerRequest) / float64(*r.MachineCPUPerRequest)
	}
	if sd, ok := s.DurablePerSecond(); ok {
		if rd, ok := r.DurablePerSecond(); ok && rd > 0 {
			rt.durable = sd / rd
		}
	}
	return rt
}

func (rt ratio) String() string {
	line := fmt.Sprintf("rps %.2f×, p99 %.2f×", rt.rps, rt.p99)
	for _, f := range []struct {
		name string
		v    float64
	}{{"cpu/req", rt.cpu}, {"machine cpu/req", rt.machine}, {"durable orders/s", rt.durable}} {
		if !math.IsNaN(f.v) {
			line += fmt.Sprintf(", %s %.2f×", f.name, f.v)
		}
	}
	return line
}

// medianRatio is each figure's median over the rounds that have it.
func medianRatio(rs []ratio) ratio {
	med := func(get func(ratio) float64) float64 {
		var vs []float64
		for _, r := range rs {
			if v := get(r); !math.IsNaN(v) {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			return math.NaN()
		}
		slices.Sort(vs)
		if n := len(vs); n%2 == 0 {
			return (vs[n/2-1] + vs[n/2]) / 2
		}
		return vs[len(vs)/2]
	}
	return ratio{
		rps:     med(func(r ratio) float64 { return r.rps }),
		p99:     med(func(r ratio) float64 { return r.p99 }),
		cpu:     med(func(r ratio) float64 { return r.cpu }),
		machine: med(func(r ratio) float64 { return r.machine }),
		durable: med(func(r ratio) float64 { return r.durable }),
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

func us(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", float64(d.Nanoseconds())/1000)
}

func sec(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func num(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *f)
}
