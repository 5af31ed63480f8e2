package testenv

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// invariantTestsFloor is how many tests docs/invariant-tests.tsv lists at
// least: the tests that check a promise (oversell, limit, lost order, one
// order per request id, money, stock identity). A test may move, be
// renamed or be merged into a stronger one, but the count of promise
// checks never goes down.
const invariantTestsFloor = 138

var promises = []string{"oversell", "limit", "lost", "requestid", "money", "identity"}

// TestEveryListedInvariantTestExists reads the list of invariant tests and
// finds each in its package's test files, so that a test moved, renamed
// or deleted without the list following is caught here, and the list
// cannot shrink in silence. Each test's guard must name a mutant of
// scripts/mutants.sh, which `scripts/mutants.sh --own` runs it under.
func TestEveryListedInvariantTestExists(t *testing.T) {
	root := filepath.Join("..", "..")
	mutants := mutantNames(t, filepath.Join(root, "scripts", "mutants.sh"))
	f, err := os.Open(filepath.Join(root, "docs", "invariant-tests.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sources := map[string]string{} // package directory → its test files, joined
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		cols := strings.Split(text, "\t")
		if len(cols) != 5 {
			t.Errorf("line %d: want 5 tab-separated columns (package, test, promises, what, guard), have %d", line, len(cols))
			continue
		}
		dir, name, tags, guard := cols[0], cols[1], cols[2], cols[4]
		if !mutants[guard] {
			t.Errorf("line %d: %s: guard %q is no mutant of scripts/mutants.sh", line, name, guard)
		}
		if seen[dir+" "+name] {
			t.Errorf("line %d: %s %s is listed twice", line, dir, name)
		}
		seen[dir+" "+name] = true
		for tag := range strings.SplitSeq(tags, ",") {
			if !slices.Contains(promises, tag) {
				t.Errorf("line %d: %s: %q is no promise (have %s)", line, name, tag, strings.Join(promises, ", "))
			}
		}
		src, ok := sources[dir]
		if !ok {
			src = testSources(t, filepath.Join(root, dir))
			sources[dir] = src
		}
		if !regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(`).MatchString(src) {
			t.Errorf("line %d: no test %s in %s: moved or renamed? Update docs/invariant-tests.tsv", line, name, dir)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) < invariantTestsFloor {
		t.Errorf("docs/invariant-tests.tsv lists %d invariant tests, fewer than the %d it may never go below", len(seen), invariantTestsFloor)
	}
}

// mutantNames reads the names of the mutants defined in the mutants=(
// array of the script at path: each entry a line "name|file|expression".
func mutantNames(tb testing.TB, path string) map[string]bool {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\nmutants=(\n")
	body, _, closed := strings.Cut(rest, "\n)\n")
	if !ok || !closed {
		tb.Fatalf("%s: no mutants=( ... ) array", path)
	}
	entry := regexp.MustCompile(`^\s*"([a-z0-9-]+)\|[^|]+\|`)
	names := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		if m := entry.FindStringSubmatch(line); m != nil {
			if names[m[1]] {
				tb.Errorf("%s: mutant %s defined twice", path, m[1])
			}
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		tb.Fatalf("%s: no mutant in its mutants=( ... ) array", path)
	}
	return names
}

// testSources is the text of every test file in dir.
func testSources(tb testing.TB, dir string) string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}
