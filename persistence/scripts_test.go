package persistence

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// scriptCalls finds, in the package's non-test Go files, the script
// files that newScript loads (name -> how many variables load it) and
// every other place that makes a script (redis.NewScript outside
// newScript), which would skip scripts/ and its header.
func scriptCalls(tb testing.TB) (loads map[string]int, elsewhere []string) {
	tb.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		tb.Fatal(err)
	}
	loads = map[string]int{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			tb.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "newScript" && fn.Recv == nil {
				continue // the one place that may call redis.NewScript
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch fun := call.Fun.(type) {
				case *ast.Ident:
					if fun.Name != "newScript" {
						return true
					}
					lit, ok := call.Args[0].(*ast.BasicLit)
					name, err := strconv.Unquote(litValue(lit))
					if !ok || err != nil {
						elsewhere = append(elsewhere, fset.Position(call.Pos()).String()+": newScript without a constant name")
						return true
					}
					loads[name]++
				case *ast.SelectorExpr:
					if x, ok := fun.X.(*ast.Ident); ok && x.Name == "redis" && fun.Sel.Name == "NewScript" {
						elsewhere = append(elsewhere, fset.Position(call.Pos()).String())
					}
				}
				return true
			})
		}
	}
	return loads, elsewhere
}

func litValue(lit *ast.BasicLit) string {
	if lit == nil || lit.Kind != token.STRING {
		return ""
	}
	return lit.Value
}

// scriptFileNames lists scripts/*.lua by name, without the extension.
func scriptFileNames(tb testing.TB) []string {
	tb.Helper()
	entries, err := os.ReadDir("scripts")
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".lua"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		tb.Fatal("no script in scripts/")
	}
	return names
}

// Every script lives in scripts/ and is loaded by exactly one variable: a
// file nobody loads is dead text a reader would trust, two variables for
// one file are two names for one thing, and a script made elsewhere has no
// header.
func TestEveryScriptFileIsOneVariable(t *testing.T) {
	t.Parallel()
	loads, elsewhere := scriptCalls(t)
	for _, at := range elsewhere {
		t.Errorf("%s: a script made outside scripts/*.lua; load it with newScript", at)
	}
	files := scriptFileNames(t)
	for _, name := range files {
		if n := loads[name]; n != 1 {
			t.Errorf("scripts/%s.lua is loaded by %d variables, want 1", name, n)
		}
	}
	for name := range loads {
		if !slices.Contains(files, name) {
			t.Errorf("newScript(%q) has no scripts/%s.lua", name, name)
		}
	}
}

var (
	keysLine    = regexp.MustCompile(`^-- KEYS(?:\[(\d+)\] -> \S|: none$)`)
	argvLine    = regexp.MustCompile(`^-- ARGV(\[\d+(\.\.\d*)?\](, ARGV\[\d+\])* -> \S|: none$)`)
	returnsLine = regexp.MustCompile(`^-- Returns: \S`)
	keysUsed    = regexp.MustCompile(`KEYS\[(\d+)\]`)
	placeholder = regexp.MustCompile(`\$\{[^}]*\}`)
)

// Every script file starts with its header: what it does and why, then
// KEYS[i] -> ... (or "KEYS: none"), ARGV[i] -> ... (or "ARGV: none") and Returns: ..., in
// that order, and names every key its body uses. A new script cannot
// leave them out.
func TestEveryScriptStartsWithItsHeader(t *testing.T) {
	t.Parallel()
	for _, name := range scriptFileNames(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(filepath.Join("scripts", name+".lua"))
			if err != nil {
				t.Fatal(err)
			}
			file := string(b)
			body := scriptBody(file)
			header := strings.Split(strings.TrimSuffix(file[:len(file)-len(body)], "\n"), "\n")
			if len(header) < 4 || !strings.HasPrefix(header[0], "-- ") || keysLine.MatchString(header[0]) {
				t.Fatalf("scripts/%s.lua does not start with a comment saying what it does", name)
			}
			firstKeys, firstArgv, firstReturns := -1, -1, -1
			documented := map[string]bool{}
			for i, l := range header {
				switch {
				case keysLine.MatchString(l):
					documented[keysLine.FindStringSubmatch(l)[1]] = true
					if firstKeys < 0 {
						firstKeys = i
					}
				case argvLine.MatchString(l) && firstArgv < 0:
					firstArgv = i
				case returnsLine.MatchString(l) && firstReturns < 0:
					firstReturns = i
				}
			}
			if firstKeys < 0 || firstArgv < firstKeys || firstReturns < firstArgv {
				t.Fatalf("scripts/%s.lua: header wants \"-- KEYS[1] -> ...\", then \"-- ARGV[1] -> ...\" (or \"-- ARGV: none\"), "+
					"then \"-- Returns: ...\"; found them at lines %d, %d, %d", name, firstKeys+1, firstArgv+1, firstReturns+1)
			}
			for _, m := range keysUsed.FindAllStringSubmatch(body, -1) {
				if !documented[m[1]] {
					t.Errorf("scripts/%s.lua uses KEYS[%s], which its header does not name", name, m[1])
				}
			}
		})
	}
}

// The names a script spells as ${name} are all substituted: one left over
// would be written to Redis as is (a channel nobody listens to, a field
// nobody reads) without any error.
func TestScriptsKeepNoPlaceholder(t *testing.T) {
	t.Parallel()
	for _, name := range scriptFileNames(t) {
		if left := placeholder.FindAllString(scriptSource(name), -1); len(left) > 0 {
			t.Errorf("scripts/%s.lua: %v not substituted; add them to scriptNames (scripts.go)", name, left)
		}
	}
}
