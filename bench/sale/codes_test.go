package sale

import (
	"os"
	"reflect"
	"testing"
	"time"
)

func TestParseAnswerReadsEveryTargetsShape(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		code    string
		orderID string
		cents   int64
	}{
		{"service OK", `{"data":{"seckillVoucher":{"code":"OK","orderId":"4242"}}}`, "OK", "4242", 0},
		{"service sold out", `{"data":{"seckillVoucher":{"code":"SOLD_OUT","orderId":null}}}`, "SOLD_OUT", "", 0},
		{"service error by code", `{"errors":[{"message":"slow down","extensions":{"code":"RATE_LIMITED","retryAfterMs":100}}],"data":null}`, "error:RATE_LIMITED", "", 0},
		{"service error without code", `{"errors":[{"message":"Cannot query field \"grabRedPacket\" on type \"Mutation\"."}]}`, `error:Cannot query field "grabRedPacket" on type "Mutation".`, "", 0},
		{"red packet OK", `{"data":{"grabRedPacket":{"code":"OK","amountCents":37}}}`, "OK", "", 37},
		{"reference OK", `{"code":"OK","orderId":"99"}`, "OK", "99", 0},
		{"reference limit", `{"code":"LIMIT_REACHED"}`, "LIMIT_REACHED", "", 0},
		{"html error page", `<html>502</html>`, LabelUnreadable, "", 0},
		{"JSON without a code", `{"data":{"seckillVoucher":null}}`, LabelUnreadable, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, id, cents := ParseAnswer([]byte(tc.body))
			if code != tc.code || id != tc.orderID || cents != tc.cents {
				t.Errorf("ParseAnswer = %q, %q, %d; want %q, %q, %d", code, id, cents, tc.code, tc.orderID, tc.cents)
			}
		})
	}
}

func TestCountCodesMostFrequentFirst(t *testing.T) {
	var outs []Outcome
	for code, n := range map[string]int{"OK": 2, "SOLD_OUT": 5, "LIMIT_REACHED": 2, "error:RATE_LIMITED": 1} {
		for range n {
			outs = append(outs, Outcome{Code: code})
		}
	}
	got := CountCodes(outs)
	want := []CodeCount{{"SOLD_OUT", 5}, {"LIMIT_REACHED", 2}, {"OK", 2}, {"error:RATE_LIMITED", 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CountCodes = %v, want %v", got, want)
	}
}

func TestRequestKeyRoundTrips(t *testing.T) {
	for _, base := range []string{"http://127.0.0.1:1/query", "http://h/seckill/7?x=1"} {
		u, a, ok := userAttempt(requestKey(base, 123, 4))
		if !ok || u != 123 || a != 4 {
			t.Errorf("%s: got user %d attempt %d ok %v", base, u, a, ok)
		}
	}
}

func TestParseStatCPUAddsUserAndSystemTime(t *testing.T) {
	// A command name with spaces and a parenthesis, utime 250, stime 50 ticks.
	stat := "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil || got.Seconds() != 3 {
		t.Errorf("parseStatCPU = %v, %v; want 3s", got, err)
	}
}

func TestParseMachineCPUCountsBusyTimeOnly(t *testing.T) {
	// user 100, nice 20, system 30, idle 9000, iowait 500, irq 40,
	// softirq 10, steal 700 ticks: busy is 200 ticks.
	stat := "cpu  100 20 30 9000 500 40 10 700 0 0\ncpu0 50 10 15 4500 250 20 5 350 0 0\n"
	got, err := parseMachineCPU(stat)
	if err != nil || got.Seconds() != 2 {
		t.Errorf("parseMachineCPU = %v, %v; want 2s", got, err)
	}
	if _, err := parseMachineCPU("intr 1 2 3\n"); err == nil {
		t.Error("a /proc/stat without its cpu line was read")
	}
}

func TestRSSReadsThisProcess(t *testing.T) {
	n, err := RSS(os.Getpid())
	if err != nil || n < 1<<20 {
		t.Errorf("RSS = %d, %v; want at least 1 MB", n, err)
	}
}

// A backend's process title names its database, with or without a
// cluster name; background processes and the postmaster have none.
func TestBackendDatabaseFromTheProcessTitle(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: 15/main: flashsale_test flashsale_flood_3462 127.0.0.1(35254) idle\x00\x00": "flashsale_flood_3462",
		"postgres: app shop [local] idle in transaction":                                       "shop",
		"postgres: 15/main: app shop 10.0.0.2(5000) SELECT":                                    "shop",
		"postgres: 15/main: checkpointer ":                                                     "",
		"postgres: 15/main: autovacuum launcher":                                               "",
		"/usr/lib/postgresql/15/bin/postgres\x00-D\x00/var/lib/postgresql/15/main":             "",
	} {
		if got := backendDatabase(title); got != want {
			t.Errorf("%q: %q, want %q", title, got, want)
		}
	}
}

// The Postgres CPU of a run counts its database's backends and the
// background processes from their own first reading, leaves other
// databases' backends out (and reports them), and cannot go negative when
// a backend ends: the "db cpu/req -12µs" of a run that shared its server.
func TestPostgresDeltaLeavesOtherDatabasesOut(t *testing.T) {
	ms := time.Millisecond
	before := map[int]PostgresProc{
		1: {CPU: 100 * ms},                       // checkpointer
		2: {CPU: 50 * ms, Database: "sale"},      // our backend, still there
		3: {CPU: 900 * ms, Database: "sale"},     // our backend, ends
		4: {CPU: 10 * ms, Database: "elsewhere"}, // another client's
	}
	after := map[int]PostgresProc{
		1: {CPU: 110 * ms},
		2: {CPU: 80 * ms, Database: "sale"},
		4: {CPU: 510 * ms, Database: "elsewhere"},
		5: {CPU: 7 * ms, Database: "sale"}, // started during the run
	}
	got := PostgresDelta(before, after, "sale")
	if want := (PostgresUse{Own: 47 * ms, Others: 500 * ms, Exited: 1}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
