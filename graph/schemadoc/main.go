// Command schemadoc writes the whole API as one schema file for readers:
// every type of graph/*.graphqls with its descriptions, the extensions
// merged into their types, the roots (Query, Mutation, Subscription)
// first. Run by go generate ./graph/schemadoc; a test keeps the
// committed file equal to what the schema files say.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"
)

//go:generate go run . -schema .. -out ../../docs/schema.graphql

func main() {
	schemaDir := flag.String("schema", "graph", "directory of the *.graphqls files")
	out := flag.String("out", "docs/schema.graphql", "file to write")
	flag.Parse()
	doc, err := render(*schemaDir)
	if err == nil {
		err = os.WriteFile(*out, doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemadoc:", err)
		os.Exit(1)
	}
}

// header opens the file. The conventions every operation shares (the
// token, the error codes) are the ones the main schema file states in its
// own header, from conventionsFrom on, copied rather than restated.
const header = `# The whole API of the flash-sale service, generated from graph/*.graphqls
# by go generate ./graph/schemadoc: do not edit. Every query, mutation,
# subscription and type, with its description; the public contract, which
# this contains, is contract/schema.graphql.
#
`

// conventionsFrom is the line of graph/schema.graphqls's header where its
// conventions begin.
const conventionsFrom = "# Identity:"

// rootOrder puts the operations first, then the types by name.
var rootOrder = []string{"Query", "Mutation", "Subscription"}

// render is the schema file for the *.graphqls files of dir.
func render(dir string) ([]byte, error) {
	srcs, err := sources(dir)
	if err != nil {
		return nil, err
	}
	var conventions string
	for _, src := range srcs {
		if src.Name == "schema.graphqls" {
			conventions = leadingComment(src.Input, conventionsFrom)
		}
	}
	if conventions == "" {
		return nil, errors.New("schema.graphqls's header has no " + conventionsFrom + " paragraph")
	}
	schema, gerr := gqlparser.LoadSchema(srcs...)
	if gerr != nil {
		return nil, gerr
	}
	names := make([]string, 0, len(schema.Types))
	for name, def := range schema.Types {
		if !def.BuiltIn && !slices.Contains(rootOrder, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString(conventions)
	for _, name := range append(slices.Clone(rootOrder), names...) {
		def := schema.Types[name]
		if def == nil {
			continue
		}
		// One type at a time, in this order: the formatter sorts a whole
		// schema by name, which would bury the operations.
		b.WriteString("\n")
		formatter.NewFormatter(&b, formatter.WithIndent("  ")).FormatSchema(&ast.Schema{Types: map[string]*ast.Definition{name: def}})
	}
	return b.Bytes(), nil
}

// sources are the *.graphqls files of dir, each named by its base name.
func sources(dir string) ([]*ast.Source, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.graphqls"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no *.graphqls in %s (%v)", dir, err)
	}
	srcs := make([]*ast.Source, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, &ast.Source{Name: filepath.Base(f), Input: string(b)})
	}
	return srcs, nil
}

// leadingComment is the part of src's opening comment that starts at the
// line beginning with from, up to the comment's end.
func leadingComment(src, from string) string {
	var out strings.Builder
	in := false
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		in = in || strings.HasPrefix(line, from)
		if in {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}
