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
const invariantTestsFloor = 130

var promises = []string{"oversell", "limit", "lost", "requestid", "money", "identity"}

// TestEveryListedInvariantTestExists reads the list of invariant tests and
// finds each in its package's test files, so that a test moved, renamed
// or deleted without the list following is caught here, and the list
// cannot shrink in silence.
func TestEveryListedInvariantTestExists(t *testing.T) {
	root := filepath.Join("..", "..")
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
		if len(cols) != 4 {
			t.Errorf("line %d: want 4 tab-separated columns (package, test, promises, what), have %d", line, len(cols))
			continue
		}
		dir, name, tags := cols[0], cols[1], cols[2]
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
