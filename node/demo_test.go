package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// The banner's and the playground's operations are valid against our
// schema (a renamed field would otherwise reach newcomers first).
func TestSampleOperationsAreValid(t *testing.T) {
	files, err := filepath.Glob("../graph/*.graphqls")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files (%v)", err)
	}
	var srcs []*ast.Source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, &ast.Source{Name: f, Input: string(b)})
	}
	schema, err := gqlparser.LoadSchema(srcs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := gqlparser.LoadQuery(schema, sampleOperations(1, 2, 3)); len(errs) > 0 {
		t.Fatalf("sample operations: %v", errs)
	}
}
