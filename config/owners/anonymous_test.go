package owners

import (
	"runtime"
	"testing"
	"time"

	"flashsale/config"
	"flashsale/httpapi"
)

// The anonymous budget scales with the cores the node schedules on
// unless set (as the start-up log shows it); 0 turns a bound off, and a
// negative value is refused.
func TestAnonymousBudgetDefaultsPerCore(t *testing.T) {
	cores := runtime.GOMAXPROCS(0)
	cases := []struct {
		name             string
		env              map[string]string
		inFlight, perSec int
		wait             time.Duration
	}{
		{"unset", nil, httpapi.AnonymousInFlightPerCore * cores, httpapi.AnonymousPerSecondPerCore * cores, httpapi.AnonymousWaitDefault},
		{"set", map[string]string{"ANON_MAX_IN_FLIGHT": "3", "ANON_PER_SEC": "7", "ANON_WAIT": "250ms"}, 3, 7, 250 * time.Millisecond},
		{"off", map[string]string{"ANON_MAX_IN_FLIGHT": "0", "ANON_PER_SEC": "0", "ANON_WAIT": "0s"}, config.Off, config.Off, config.Off},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if err != nil {
				t.Fatal(err)
			}
			c = c.Effective(Table())
			if c.AnonMaxInFlight != tc.inFlight || c.AnonPerSec != tc.perSec || c.AnonWait != tc.wait {
				t.Fatalf("in flight %d, per second %d, wait %v; want %d, %d, %v", c.AnonMaxInFlight, c.AnonPerSec, c.AnonWait, tc.inFlight, tc.perSec, tc.wait)
			}
		})
	}
	for _, env := range []map[string]string{{"ANON_MAX_IN_FLIGHT": "-1"}, {"ANON_PER_SEC": "x"}, {"ANON_WAIT": "-1s"}} {
		if _, err := load(env); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}
