package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"flashsale/bench/sale"
)

func printSummary(w io.Writer, reps []*sale.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tscenario\trequests\trps\tp50\tp90\tp99\tmax\tcpu/req\tbench cpu/req\tredis cpu/req\tdb cpu/req\tmachine cpu/req\tredis cmds/req\tdb lag\tdurable/s\tchecks")
	for _, r := range reps {
		checks := "ok"
		if len(r.Violations) > 0 {
			checks = fmt.Sprintf("%d VIOLATIONS", len(r.Violations))
		}
		durable := "-"
		if d, ok := r.DurablePerSecond(); ok {
			durable = fmt.Sprintf("%.0f", d)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Target, r.Scenario, r.Requests, r.RPS,
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

// ratios compares the service with each other target of the run (the
// reference designs, other named service nodes), per scenario.
func ratios(reps []*sale.Report) []string {
	var out []string
	for _, s := range reps {
		if s.Target != "service" {
			continue
		}
		for _, r := range reps {
			if r.Scenario != s.Scenario || r.Target == "service" || r.RPS == 0 {
				continue
			}
			line := fmt.Sprintf("%s: service/%s rps %.2f×, p99 %.2f×", s.Scenario, r.Target, s.RPS/r.RPS,
				float64(s.Latency.P99)/float64(max(r.Latency.P99, 1)))
			if s.CPUPerRequest != nil && r.CPUPerRequest != nil && *r.CPUPerRequest > 0 {
				line += fmt.Sprintf(", cpu/req %.2f×", float64(*s.CPUPerRequest)/float64(*r.CPUPerRequest))
			}
			if s.MachineCPUPerRequest != nil && r.MachineCPUPerRequest != nil && *r.MachineCPUPerRequest > 0 {
				line += fmt.Sprintf(", machine cpu/req %.2f×", float64(*s.MachineCPUPerRequest)/float64(*r.MachineCPUPerRequest))
			}
			if sd, ok := s.DurablePerSecond(); ok {
				if rd, ok := r.DurablePerSecond(); ok && rd > 0 {
					line += fmt.Sprintf(", durable orders/s %.2f×", sd/rd)
				}
			}
			out = append(out, line)
		}
	}
	return out
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
