package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
)

// docs/schema.graphql is what the schema files say: a field added to
// graph/*.graphqls without go generate ./graph/schemadoc fails here.
func TestTheDocsSchemaIsTheSchemaFiles(t *testing.T) {
	t.Parallel()
	want, err := render("..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "schema.graphql"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("docs/schema.graphql differs from graph/*.graphqls: run go generate ./graph/schemadoc")
	}
}

// The file loses nothing on the way: read back as a schema, it has every
// type, field, argument and enum value of the schema files, with the same
// types and descriptions.
func TestTheDocsSchemaHasEveryFieldAndDescription(t *testing.T) {
	t.Parallel()
	srcs, err := sources("..")
	if err != nil {
		t.Fatal(err)
	}
	ours := mustSchema(t, srcs...)
	doc, err := render("..")
	if err != nil {
		t.Fatal(err)
	}
	theirs := mustSchema(t, &ast.Source{Name: "schema.graphql", Input: string(doc)})
	for name, def := range ours.Types {
		if def.BuiltIn {
			continue
		}
		got := theirs.Types[name]
		if got == nil {
			t.Errorf("type %s is missing", name)
			continue
		}
		if got.Description != def.Description {
			t.Errorf("%s: description %q, want %q", name, got.Description, def.Description)
		}
		for _, f := range def.Fields {
			g := got.Fields.ForName(f.Name)
			switch {
			case g == nil:
				t.Errorf("%s.%s is missing", name, f.Name)
			case g.Type.String() != f.Type.String() || g.Description != f.Description || len(g.Arguments) != len(f.Arguments):
				t.Errorf("%s.%s: %s %q (%d arguments), want %s %q (%d)", name, f.Name, g.Type, g.Description, len(g.Arguments), f.Type, f.Description, len(f.Arguments))
			}
		}
		for _, v := range def.EnumValues {
			if got.EnumValues.ForName(v.Name) == nil {
				t.Errorf("%s.%s is missing", name, v.Name)
			}
		}
	}
}

func mustSchema(tb testing.TB, srcs ...*ast.Source) *ast.Schema {
	tb.Helper()
	s, err := gqlparser.LoadSchema(srcs...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
