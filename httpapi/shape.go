package httpapi

import (
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/graph"
)

// shapeLimits bound what gqlparser's validation may be given. Its
// OverlappingFieldsCanBeMerged rule compares every pair of fields that
// share a response key, and the sub-selections of each such pair again,
// so one selection set of 1985 `id`s (6 KB, within the token limit) cost
// 0.5–0.95 s of CPU, and a few repeats at each of several levels
// multiply. The shape is checked on the parsed document before validation
// sees it, by a walk whose own work is bounded by the limits: sizes are
// counted, and the rule's comparisons are counted (not made) up to a
// budget.
//
// Every limit is far above what the contract's clients send: the largest
// selection set of GraphiQL's introspection query has 11 fields and the
// whole query expands to a few hundred; a voucher has 10 fields.
type shapeLimits struct {
	// maxFields caps the fields of one selection set, counting those its
	// fragments bring in.
	maxFields int
	// maxRepeats caps the fields of one selection set that share a
	// response key (`id id`, or `id` both in the set and in a fragment
	// spread into it): what the quadratic rule feeds on.
	maxRepeats int
	// maxAliases caps the aliased fields of a document: aliases are how
	// one field is asked many times under different keys.
	maxAliases int
	// maxExpanded caps the fields of the document with every fragment
	// spread written out, so that fragments spreading fragments cannot
	// multiply a short document into a huge one.
	maxExpanded int
	// maxMerge caps the work of the overlapping-fields rule as the walk
	// counts it: one unit per pair of same-key fields compared (at every
	// level the rule recurses to) and per field of the sub-selections it
	// groups to compare them. Fragments are counted as if written out,
	// which overcounts what the rule (which remembers fragment pairs)
	// does: the budget errs on the side of refusing.
	maxMerge int
	// maxDirectives caps the directives of a document and maxArguments
	// the arguments of one field or directive, as written (fragments not
	// expanded): validation reports each unknown one, so they are what an
	// error flood is made of (990 unknown directives in 5 KB made 1,979
	// errors). The schema's fields take at most 4 arguments and clients
	// use a few @include or @skip.
	maxDirectives, maxArguments int
	// depth and introspectionDepth are the depth limits (see depthLimit),
	// checked here too so a deep document never reaches validation.
	depth, introspectionDepth int
}

func newShapeLimits(l Limits) shapeLimits {
	return shapeLimits{
		maxFields:          100,
		maxRepeats:         8,
		maxAliases:         100,
		maxExpanded:        2000,
		maxMerge:           2000,
		maxDirectives:      100,
		maxArguments:       16,
		depth:              l.MaxDepth,
		introspectionDepth: l.MaxIntrospectionDepth,
	}
}

// shapeWalk is one check of a document: fragments are found by name (the
// parser does not link spreads to definitions; validation does).
type shapeWalk struct {
	lim       shapeLimits
	fragments ast.FragmentDefinitionList
	expanded  int
	aliases   int
	mergeWork int
	// active holds the fragments being expanded, so a cycle (which
	// validation would reject) stops here instead of looping.
	active map[string]bool
}

// checkShape walks every operation and every fragment definition of doc
// (validation checks both) and reports the first limit passed, or nil.
func checkShape(doc *ast.QueryDocument, lim shapeLimits) *gqlerror.Error {
	if err := checkDirectives(doc, lim); err != nil {
		return err
	}
	w := &shapeWalk{lim: lim, fragments: doc.Fragments, active: map[string]bool{}}
	for _, op := range doc.Operations {
		if err := w.set(op.SelectionSet); err != nil {
			return err
		}
		for _, f := range w.flatten(op.SelectionSet, nil) {
			limit := lim.depth
			if f.Name == "__schema" || f.Name == "__type" {
				limit = lim.introspectionDepth
			}
			if err := w.field(f, 1, limit); err != nil {
				return err
			}
		}
	}
	for _, frag := range doc.Fragments {
		// A fragment's own depth is bounded where it is spread; here only
		// its size and repeats matter.
		if err := w.walkSet(frag.SelectionSet, 1, lim.introspectionDepth); err != nil {
			return err
		}
	}
	return nil
}

// checkDirectives counts the directives of doc and the arguments of
// each field and directive, as written: one pass over the text's nodes.
func checkDirectives(doc *ast.QueryDocument, lim shapeLimits) *gqlerror.Error {
	n := 0
	directives := func(list ast.DirectiveList) *gqlerror.Error {
		n += len(list)
		if n > lim.maxDirectives {
			return graph.ShapeError("TOO_MANY_DIRECTIVES", "the query has more than %d directives", lim.maxDirectives)
		}
		for _, d := range list {
			if len(d.Arguments) > lim.maxArguments {
				return graph.ShapeError("TOO_MANY_ARGUMENTS", "a directive has more than %d arguments", lim.maxArguments)
			}
		}
		return nil
	}
	var set func(ast.SelectionSet) *gqlerror.Error
	set = func(s ast.SelectionSet) *gqlerror.Error {
		for _, sel := range s {
			var err *gqlerror.Error
			switch x := sel.(type) {
			case *ast.Field:
				if len(x.Arguments) > lim.maxArguments {
					return graph.ShapeError("TOO_MANY_ARGUMENTS", "a field has more than %d arguments", lim.maxArguments)
				}
				if err = directives(x.Directives); err == nil {
					err = set(x.SelectionSet)
				}
			case *ast.InlineFragment:
				if err = directives(x.Directives); err == nil {
					err = set(x.SelectionSet)
				}
			case *ast.FragmentSpread:
				err = directives(x.Directives)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	for _, op := range doc.Operations {
		if err := directives(op.Directives); err != nil {
			return err
		}
		for _, v := range op.VariableDefinitions {
			if err := directives(v.Directives); err != nil {
				return err
			}
		}
		if err := set(op.SelectionSet); err != nil {
			return err
		}
	}
	for _, f := range doc.Fragments {
		if err := directives(f.Directives); err != nil {
			return err
		}
		if err := set(f.SelectionSet); err != nil {
			return err
		}
	}
	return nil
}

// field checks f, at depth d of a tree whose limit is limit, and what it
// selects.
func (w *shapeWalk) field(f *ast.Field, d, limit int) *gqlerror.Error {
	if d > limit {
		return graph.ShapeError("DEPTH_LIMIT_EXCEEDED", "query is nested more than %d levels deep", limit)
	}
	return w.walkSet(f.SelectionSet, d+1, limit)
}

// walkSet checks one selection set and, below it, every field it holds.
func (w *shapeWalk) walkSet(set ast.SelectionSet, d, limit int) *gqlerror.Error {
	if len(set) == 0 {
		return nil
	}
	if err := w.set(set); err != nil {
		return err
	}
	for _, f := range w.flatten(set, nil) {
		if err := w.field(f, d, limit); err != nil {
			return err
		}
	}
	return nil
}

// set checks the size, repeats and aliases of one selection set, with its
// fragments flattened into it. Each field is counted against the
// document's expansion budget as it is checked, so the whole walk stops
// after maxExpanded fields whatever fragments multiply.
func (w *shapeWalk) set(set ast.SelectionSet) *gqlerror.Error {
	fields := w.flatten(set, nil)
	if len(fields) > w.lim.maxFields {
		return graph.ShapeError("SELECTION_TOO_WIDE", "a selection set has more than %d fields", w.lim.maxFields)
	}
	keys := make(map[string][]*ast.Field, len(fields))
	for _, f := range fields {
		w.expanded++
		if w.expanded > w.lim.maxExpanded {
			return graph.ShapeError("QUERY_TOO_LARGE", "the query selects more than %d fields with its fragments expanded", w.lim.maxExpanded)
		}
		if f.Alias != "" && f.Alias != f.Name {
			w.aliases++
			if w.aliases > w.lim.maxAliases {
				return graph.ShapeError("TOO_MANY_ALIASES", "the query has more than %d aliases", w.lim.maxAliases)
			}
		}
		key := responseKey(f)
		keys[key] = append(keys[key], f)
		if len(keys[key]) > w.lim.maxRepeats {
			return graph.ShapeError("REPEATED_FIELDS", "a selection set asks for %q more than %d times", graph.TruncateName(key), w.lim.maxRepeats)
		}
	}
	for _, same := range keys {
		for i, a := range same {
			for _, b := range same[i+1:] {
				if err := w.merge(a, b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// merge counts what the overlapping-fields rule does to check that a and
// b (same response key) can be merged: compare them, then every pair of
// same-key fields of their sub-selections, recursively.
func (w *shapeWalk) merge(a, b *ast.Field) *gqlerror.Error {
	w.mergeWork++
	if len(a.SelectionSet) > 0 && len(b.SelectionSet) > 0 {
		fa, fb := w.flatten(a.SelectionSet, nil), w.flatten(b.SelectionSet, nil)
		w.mergeWork += len(fa) + len(fb)
		if w.mergeWork > w.lim.maxMerge {
			return w.mergeError()
		}
		byKey := make(map[string][]*ast.Field, len(fb))
		for _, f := range fb {
			byKey[responseKey(f)] = append(byKey[responseKey(f)], f)
		}
		for _, x := range fa {
			for _, y := range byKey[responseKey(x)] {
				if err := w.merge(x, y); err != nil {
					return err
				}
			}
		}
	}
	if w.mergeWork > w.lim.maxMerge {
		return w.mergeError()
	}
	return nil
}

func (w *shapeWalk) mergeError() *gqlerror.Error {
	return graph.ShapeError("REPEATED_FIELDS", "the query repeats fields too often to be checked: ask for each field once")
}

func responseKey(f *ast.Field) string {
	if f.Alias != "" {
		return f.Alias
	}
	return f.Name
}

// flatten lists the fields of set with inline fragments and fragment
// spreads written out; it stops growing past maxFields+1, which is all the
// caller needs to know, so a fragment spread many times costs no more.
func (w *shapeWalk) flatten(set ast.SelectionSet, out []*ast.Field) []*ast.Field {
	for _, sel := range set {
		if len(out) > w.lim.maxFields {
			return out
		}
		switch s := sel.(type) {
		case *ast.Field:
			out = append(out, s)
		case *ast.InlineFragment:
			out = w.flatten(s.SelectionSet, out)
		case *ast.FragmentSpread:
			def := w.fragments.ForName(s.Name)
			if def == nil || w.active[s.Name] {
				continue // validation reports unknown fragments and cycles
			}
			w.active[s.Name] = true
			out = w.flatten(def.SelectionSet, out)
			delete(w.active, s.Name)
		}
	}
	return out
}
