// Command testtimes prints where a test run's time went, from the event
// streams of `go test -json` (gotestsum's --jsonfile writes the same):
// each package's wall time and every test slower than a threshold, the
// slowest first, so that a test or package that got slower stands out.
//
//	go run ./cmd/testtimes [-min 5s] [-markdown] FILE...
//
// A package's wall time is what go test printed on its "ok" or "FAIL"
// line. A test's time is its own (a parallel test's starts when it stops
// waiting for its turn); subtests are left out, their parent counts them.
// The scripts/test.sh step "test times" runs it on the suite's streams.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(1)
	}
}

// event is the part of a test2json event that timing needs.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
}

// entry is one timed package or test; a package's Test is empty.
type entry struct {
	Package, Test, Result string
	Elapsed               time.Duration
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("testtimes", flag.ContinueOnError)
	minTest := fs.Duration("min", 5*time.Second, "list the tests that took at least this long")
	markdown := fs.Bool("markdown", false, "print Markdown tables (docs/OPERATIONS.md holds one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: testtimes [-min 5s] [-markdown] FILE... (go test -json output)")
	}
	var pkgs, tests []entry
	for _, name := range fs.Args() {
		p, t, err := readFile(name)
		if err != nil {
			return err
		}
		pkgs, tests = append(pkgs, p...), append(tests, t...)
	}
	tests = slices.DeleteFunc(tests, func(e entry) bool { return e.Elapsed < *minTest })
	slowestFirst := func(a, b entry) int { return int(b.Elapsed - a.Elapsed) }
	slices.SortStableFunc(pkgs, slowestFirst)
	slices.SortStableFunc(tests, slowestFirst)
	w := bufio.NewWriter(out)
	print := func(title string, list []entry) {
		if *markdown {
			fmt.Fprintf(w, "| %s | result | wall time |\n|---|---|---:|\n", title)
			for _, e := range list {
				fmt.Fprintf(w, "| `%s` | %s | %.1f s |\n", e.name(), e.Result, e.Elapsed.Seconds())
			}
		} else {
			fmt.Fprintf(w, "%s:\n", title)
			for _, e := range list {
				fmt.Fprintf(w, "  %7.1fs  %-4s  %s\n", e.Elapsed.Seconds(), e.Result, e.name())
			}
		}
		fmt.Fprintln(w)
	}
	print("package", pkgs)
	print(fmt.Sprintf("test (%s or longer)", *minTest), tests)
	return w.Flush()
}

func (e entry) name() string {
	if e.Test == "" {
		return e.Package
	}
	return e.Package + " " + e.Test
}

// readFile reads one event stream: the packages that ended (skipped ones,
// which have no test files, left out) and the top-level tests that ended.
func readFile(name string) (pkgs, tests []entry, err error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("open test events: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 || sc.Bytes()[0] != '{' {
			continue // go test's own lines about a build that failed
		}
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, nil, fmt.Errorf("%s:%d: not a go test -json event: %w", name, line, err)
		}
		if ev.Action != "pass" && ev.Action != "fail" && ev.Action != "skip" {
			continue
		}
		e := entry{Package: ev.Package, Test: ev.Test, Result: ev.Action,
			Elapsed: time.Duration(ev.Elapsed * float64(time.Second))}
		switch {
		case ev.Test == "" && ev.Action == "skip":
			// a package without tests
		case ev.Test == "":
			pkgs = append(pkgs, e)
		case !strings.Contains(ev.Test, "/"):
			tests = append(tests, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	return pkgs, tests, nil
}
