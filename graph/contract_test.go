package graph_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// The public contract is kept in the repository (docs/contract/), so a
// clone has it; these tests keep that copy identical to the shared one
// when the shared one is beside the repository (../shared/contract), and
// always check that our schema contains the contract.

// contractFiles are the contract's files, by name.
var contractFiles = []string{"schema.graphql", "config.md", "db.md"}

func TestContractCopyIsIdenticalToTheSharedContract(t *testing.T) {
	shared := filepath.Join("..", "..", "shared", "contract")
	if _, err := os.Stat(shared); errors.Is(err, fs.ErrNotExist) {
		t.Skip("no ../shared/contract beside the repository (a clone); docs/contract is the contract")
	}
	for _, name := range contractFiles {
		want, err := os.ReadFile(filepath.Join(shared, name))
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(filepath.Join("..", "docs", "contract", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			t.Errorf("docs/contract/%s differs from the shared contract: copy %s over it", name, filepath.Join(shared, name))
		}
	}
}

// TestSchemaContainsTheContract is what the shared check-contract tool
// does: every type, field, argument, input field and enum value of the
// contract exists in graph/*.graphqls with the same type (nullability
// included); the service may add types, fields and optional arguments.
func TestSchemaContainsTheContract(t *testing.T) {
	ours, err := filepath.Glob("*.graphqls")
	if err != nil || len(ours) == 0 {
		t.Fatalf("no graph/*.graphqls (%v)", err)
	}
	if problems := contractProblems(t, filepath.Join("..", "docs", "contract", "schema.graphql"), ours...); len(problems) > 0 {
		for _, p := range problems {
			t.Error("contract:", p)
		}
	}
}

func loadSchema(tb testing.TB, paths ...string) *ast.Schema {
	tb.Helper()
	var srcs []*ast.Source
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		srcs = append(srcs, &ast.Source{Name: p, Input: string(b)})
	}
	s, err := gqlparser.LoadSchema(srcs...)
	if err != nil {
		tb.Fatalf("schema %v: %v", paths, err)
	}
	return s
}

// contractProblems lists how the schema in ours breaks the contract.
func contractProblems(tb testing.TB, contract string, ours ...string) []string {
	tb.Helper()
	want, have := loadSchema(tb, contract), loadSchema(tb, ours...)
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	names := make([]string, 0, len(want.Types))
	for n := range want.Types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		wt := want.Types[n]
		if wt.BuiltIn {
			continue
		}
		ht, ok := have.Types[n]
		if !ok {
			bad("missing type %s", n)
			continue
		}
		if ht.Kind != wt.Kind {
			bad("type %s is %s, contract says %s", n, ht.Kind, wt.Kind)
			continue
		}
		for _, ev := range wt.EnumValues {
			if ht.EnumValues.ForName(ev.Name) == nil {
				bad("enum %s lacks value %s", n, ev.Name)
			}
		}
		for _, wf := range wt.Fields {
			if len(wf.Name) > 1 && wf.Name[:2] == "__" {
				continue
			}
			hf := ht.Fields.ForName(wf.Name)
			if hf == nil {
				bad("%s.%s is missing", n, wf.Name)
				continue
			}
			if hf.Type.String() != wf.Type.String() {
				bad("%s.%s has type %s, contract says %s", n, wf.Name, hf.Type, wf.Type)
			}
			for _, wa := range wf.Arguments {
				ha := hf.Arguments.ForName(wa.Name)
				if ha == nil {
					bad("%s.%s lacks argument %s", n, wf.Name, wa.Name)
				} else if ha.Type.String() != wa.Type.String() {
					bad("%s.%s(%s) has type %s, contract says %s", n, wf.Name, wa.Name, ha.Type, wa.Type)
				}
			}
			for _, ha := range hf.Arguments {
				if wf.Arguments.ForName(ha.Name) == nil && ha.Type.NonNull && ha.DefaultValue == nil {
					bad("%s.%s adds required argument %s (breaks contract clients)", n, wf.Name, ha.Name)
				}
			}
		}
	}
	for _, op := range []string{"Query", "Mutation", "Subscription"} {
		if want.Types[op] != nil && have.Types[op] == nil {
			bad("missing root type %s", op)
		}
	}
	return problems
}

// The check itself must catch a schema that drops or changes part of the
// contract, or the test above proves nothing.
func TestContractCheckCatchesADifference(t *testing.T) {
	dir := t.TempDir()
	contract := filepath.Join(dir, "contract.graphql")
	write := func(path, sdl string) {
		if err := os.WriteFile(path, []byte(sdl), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(contract, "type Query { a(x: Int): String! b: Int }\nenum E { ONE TWO }")
	cases := []struct{ name, sdl string }{
		{"missing field", "type Query { a(x: Int): String! }\nenum E { ONE TWO }"},
		{"nullability changed", "type Query { a(x: Int): String b: Int }\nenum E { ONE TWO }"},
		{"missing argument", "type Query { a: String! b: Int }\nenum E { ONE TWO }"},
		{"required argument added", "type Query { a(x: Int, y: Int!): String! b: Int }\nenum E { ONE TWO }"},
		{"missing enum value", "type Query { a(x: Int): String! b: Int }\nenum E { ONE }"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ours := filepath.Join(t.TempDir(), "ours.graphqls")
			write(ours, tc.sdl)
			if p := contractProblems(t, contract, ours); len(p) == 0 {
				t.Fatal("no problem found")
			}
		})
	}
	ours := filepath.Join(dir, "ours.graphqls")
	write(ours, "type Query { a(x: Int, z: Int = 1): String! b: Int c: Int }\nenum E { ONE TWO THREE }\ntype Extra { d: Int }")
	if p := contractProblems(t, contract, ours); len(p) != 0 {
		t.Fatalf("additions refused: %v", p)
	}
}
