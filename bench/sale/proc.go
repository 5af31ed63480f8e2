package sale

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times
// (100 on every architecture Go supports).
const clockTicks = 100

// CPUTime is the user plus system time pid has used so far, from
// /proc/<pid>/stat (fields 14 and 15, after the command name).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// cpuTimes is the CPU time of several processes together.
func cpuTimes(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := CPUTime(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// MachineCPU is the CPU time every core of this machine has spent busy
// so far (user, nice, system, irq and softirq of /proc/stat's cpu line;
// not idle, iowait or time stolen by a hypervisor).
func MachineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineCPU(string(b))
}

func parseMachineCPU(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected /proc/stat cpu line %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system (idle iowait) irq softirq
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad /proc/stat field %q", f[i])
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

// PostgresProcs is the CPU time of every process of this machine named
// postgres (a local server, its background processes and its backends),
// by pid, with the database each backend serves ("" for the background
// processes), read from its process title ("postgres: [cluster: ]user
// database host(port) state"). A shared server serves other clients too:
// the backends of other databases are told apart by their title, so a
// measurement can leave them out and say they were there.
func PostgresProcs() map[int]PostgresProc {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	out := map[int]PostgresProc{}
	for _, c := range comms {
		name, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(name)) != "postgres" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
		d, err := CPUTime(pid)
		if err != nil {
			continue
		}
		title, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out[pid] = PostgresProc{CPU: d, Database: backendDatabase(string(title))}
	}
	return out
}

// PostgresCPU is the CPU time of every postgres process of this machine
// together; false when there is none.
func PostgresCPU() (time.Duration, bool) {
	procs := PostgresProcs()
	var sum time.Duration
	for _, p := range procs {
		sum += p.CPU
	}
	return sum, len(procs) > 0
}

// PostgresProc is one postgres process: its CPU time and, for a backend,
// its database.
type PostgresProc struct {
	CPU      time.Duration
	Database string
}

// backendDatabase is the database of a backend's process title, "" for a
// background process (checkpointer, walwriter, ...) or the postmaster. A
// backend's title ends "user database host(port) state" or "user
// database [local] state", after "postgres: " and an optional "cluster: ".
func backendDatabase(title string) string {
	title = strings.TrimRight(strings.ReplaceAll(title, "\x00", " "), " ")
	rest, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	for i := 2; i < len(f); i++ {
		if f[i] == "[local]" || strings.HasSuffix(f[i], ")") && strings.Contains(f[i], "(") {
			return f[i-1]
		}
	}
	return ""
}

// PostgresUse is what a database's work cost a local Postgres between two
// PostgresProcs readings: Own is its backends' CPU and the background
// processes' (which work for every database), Others the other databases'
// backends' CPU, Exited how many of its backends ended in between (their
// CPU is lost to the reading).
type PostgresUse struct {
	Own, Others time.Duration
	Exited      int
}

// PostgresDelta is the use of database between the readings before and
// after, each process counted from its own start reading (0 for a process
// that started in between), so an exited backend cannot make it negative.
func PostgresDelta(before, after map[int]PostgresProc, database string) PostgresUse {
	var u PostgresUse
	for pid, a := range after {
		d := a.CPU - before[pid].CPU
		if b, ok := before[pid]; ok && b.Database != a.Database || d < 0 {
			d = a.CPU // a pid reused by another process
		}
		if a.Database == "" || a.Database == database {
			u.Own += d
		} else {
			u.Others += d
		}
	}
	for pid, b := range before {
		if _, ok := after[pid]; !ok && b.Database == database {
			u.Exited++
		}
	}
	return u
}

// isLocal reports whether rawURL's host is this machine's loopback.
func isLocal(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// RSS is a process's resident set size, from /proc/<pid>/status.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func parseStatCPU(stat string) (time.Duration, error) {
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc stat line")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat line")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc stat times")
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// PIDByURL finds the local process listening on the port of rawURL, when
// its host is this machine's loopback; 0 when there is none or /proc
// does not say.
func PIDByURL(rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return 0
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(f, port, inodes)
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}

// listeningInodes adds the inodes of sockets listening on port, from a
// /proc/net/tcp table.
func listeningInodes(table string, port int, into map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// local_address rem_address st ... inode (field 9); 0A = LISTEN.
		if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
			into[fs[9]] = true
		}
	}
}

// redisCounters are what Redis says it has done so far.
type redisCounters struct {
	commands int64
	cpu      time.Duration
	// calls counts each command's calls, those run inside scripts too.
	calls map[string]int64
}

// readRedis reads INFO stats and cpu.
func readRedis(ctx context.Context, rdb *redis.Client) (redisCounters, error) {
	info, err := rdb.Info(ctx, "stats", "cpu", "commandstats").Result()
	if err != nil {
		return redisCounters{}, err
	}
	c := redisCounters{calls: map[string]int64{}}
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			c.commands, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_sys", "used_cpu_user":
			s, _ := strconv.ParseFloat(v, 64)
			c.cpu += time.Duration(s * float64(time.Second))
		default:
			// cmdstat_get:calls=12,usec=...
			if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				c.calls[name], _ = strconv.ParseInt(calls, 10, 64)
			}
		}
	}
	return c, nil
}
