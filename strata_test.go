package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// strata is the house from top to bottom, one top-level folder (or a few
// that never import each other) per level. A package imports only from
// its own folder and the levels below it, so the house reads top to
// bottom and no arrow between folders points back up. A new top-level
// folder must be placed here, with why it sits where it does.
var strata = []struct {
	folders []string
	why     string
}{
	{[]string{".", "cmd"}, "the commands: main packages, imported by nothing"},
	{[]string{"e2e"}, "process-level tests: they drive the built binary and the assembly"},
	{[]string{"bench"}, "the load tool and the designs it compares, run by cmd/seckill-bench"},
	{[]string{"testkit"}, "test kits (stores per test, the node for tests, the fault suite): they build what lies below"},
	{[]string{"node"}, "the assembly: wires every part below in one ordered list"},
	{[]string{"config"}, "the settings table and what the configured packages say of their settings"},
	{[]string{"httpapi"}, "the HTTP edge: serves GraphQL over HTTP"},
	{[]string{"graph"}, "GraphQL only: speaks to the use cases through interfaces it declares"},
	{[]string{"usecase"}, "the use cases: each declares the stores and sequencers it needs"},
	{[]string{"actors"}, "the sequencers and the persistence actor, over stores they declare"},
	{[]string{"persistence"}, "storage only: SQL, Redis keys and scripts, and the leases kept in them"},
	{[]string{"internal"}, "mechanisms (auth, metrics, lifecycle, maintenance, ...): only each other and domain"},
	{[]string{"domain"}, "the vocabulary: depends on nothing of ours"},
}

const module = "flashsale"

// No folder imports one at its level or above: every non-test file of
// the module is read for its imports, each mapped to its top-level folder.
func TestFoldersImportOnlyTheStrataBelow(t *testing.T) {
	t.Parallel()
	level := map[string]int{}
	for i, s := range strata {
		for _, f := range s.folders {
			level[f] = i
		}
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		from := folderOf(filepath.ToSlash(filepath.Dir(path)))
		own, placed := level[from]
		if !placed {
			t.Errorf("%s: the folder %s is in no stratum; place it in strata (strata_test.go)", path, from)
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := folderOf(strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			if to == from {
				continue
			}
			switch l, ok := level[to]; {
			case !ok:
				t.Errorf("%s imports %s: the folder %s is in no stratum; place it in strata (strata_test.go)", path, imp, to)
			case l <= own:
				t.Errorf("%s imports %s: %s (level %d of %d) may import only the levels below it; %s is level %d",
					path, imp, from, own+1, len(strata), to, l+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// folderOf is the top-level folder of a slash-separated directory in the
// module, "." for the root.
func folderOf(dir string) string {
	if dir == "" || dir == "." {
		return "."
	}
	top, _, _ := strings.Cut(dir, "/")
	return top
}
