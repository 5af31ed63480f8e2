package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// tally sums the rounds of one fault kind.
type tally struct {
	rounds, failed, skipped                       int
	checks                                        map[string]int // violations by check
	ok, sold, lost, open, dead, unavail, gqlError int
	took, slowest                                 time.Duration
}

func (t *tally) add(r RoundResult) {
	t.rounds++
	if r.Skipped != "" {
		t.skipped++
		return
	}
	if r.Failed() {
		t.failed++
	}
	if r.Err != nil {
		t.checks["could-not-check"]++
	}
	for _, v := range r.outcome.violations {
		t.checks[v.check]++
	}
	o := r.outcome
	t.ok += o.okAnswers
	t.sold += o.sold
	t.lost += o.lost
	t.open += o.unsettled
	t.dead += o.dead
	t.unavail += o.unavail
	t.gqlError += o.gqlErrors
	t.took += r.Took
	t.slowest = max(t.slowest, o.maxTook)
}

func (t *tally) violations() string {
	if len(t.checks) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(t.checks)) {
		parts = append(parts, fmt.Sprintf("%s×%d", c, t.checks[c]))
	}
	return strings.Join(parts, " ")
}

// writeTable prints the run as rounds × fault kind × outcome. "skipped"
// counts rounds of a configuration the service refuses at start; "lost"
// counts OK'd orders missing from Postgres: a violation in durable rounds,
// a figure where Redis was wiped; "open" grabs whose outcome stayed
// unknown (a lost reply that a request id could not settle); "slowest
// grab" the longest a grab waited for its answer (the design allows 500 ms
// while a store is down).
func writeTable(w io.Writer, rep *Report) {
	byKind := map[string]*tally{}
	total := &tally{checks: map[string]int{}}
	for _, r := range rep.Rounds {
		t := byKind[r.Kind]
		if t == nil {
			t = &tally{checks: map[string]int{}}
			byKind[r.Kind] = t
		}
		t.add(r)
		total.add(r)
	}
	fmt.Fprintf(w, "\nseed %d: %d rounds, %d failed, %d not runnable (skipped)\n", rep.Seed, total.rounds, total.failed, total.skipped)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault kind\trounds\tfailed\tskipped\tOK answers\tsold\tlost\topen\tdead\tUNAVAILABLE\tgql errors\tslowest grab s\ts/round\tviolations")
	row := func(name string, t *tally) {
		avg := 0.0
		if t.rounds > 0 {
			avg = t.took.Seconds() / float64(t.rounds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.1f\t%s\n",
			name, t.rounds, t.failed, t.skipped, t.ok, t.sold, t.lost, t.open, t.dead, t.unavail, t.gqlError, t.slowest.Seconds(), avg, t.violations())
	}
	for _, k := range kinds {
		if t := byKind[k.name]; t != nil {
			row(k.name, t)
		}
	}
	row("total", total)
	_ = tw.Flush()
}
