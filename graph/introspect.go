package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/internal/admitcache"
	"flashsale/internal/metrics"
)

// IntrospectionMode says who may ask the schema (__schema, __type) on
// /query (INTROSPECTION). __typename is not introspection in this sense:
// it needs nothing and costs nothing.
type IntrospectionMode string

// The introspection modes.
const (
	// IntrospectionOff refuses __schema and __type to everyone.
	IntrospectionOff IntrospectionMode = "off"
	// IntrospectionToken answers them to callers with a valid token of
	// any role: the default with real stores, where the schema is no
	// secret but an anonymous client should not be able to make the node
	// work for it.
	IntrospectionToken IntrospectionMode = "token"
	// IntrospectionPublic answers them to anyone: the embedded mode's
	// default, so the playground shows the schema before a token is
	// pasted.
	IntrospectionPublic IntrospectionMode = "public"
)

// ParseIntrospectionMode reads a mode; true and false, the values of the
// setting when it was a switch, mean public and off.
func ParseIntrospectionMode(s string) (IntrospectionMode, error) {
	switch m := IntrospectionMode(strings.ToLower(strings.TrimSpace(s))); m {
	case IntrospectionOff, IntrospectionToken, IntrospectionPublic:
		return m, nil
	case "true":
		return IntrospectionPublic, nil
	case "false":
		return IntrospectionOff, nil
	}
	return "", fmt.Errorf("want off, token or public, got %q", s)
}

// MaxIntrospectionFieldsDefault is the default price limit of an
// introspection operation, in fields of its answer: GraphiQL's full
// schema query asks about 3,400 here, and 100 aliases of
// `__schema { types { name fields { name args { name } } } }` would ask
// 47,200 (a 760 KB answer).
const MaxIntrospectionFieldsDefault = 10000

// introspectionAnswers answers introspection operations (__schema, __type
// and __typename, nothing else) from one model of the schema built when
// the handler is, instead of gqlgen's executor: the schema never changes
// while the node runs, and the executor spent about 2 µs and 0.9 KB per
// field of such an answer (wrapping the schema anew for every field,
// a field context per field), so GraphiQL's schema query cost 7.5 ms and
// 3 MB, and 100 aliases of one 5 KB document 200 ms. The model answers
// the same bytes (TestIntrospectionAnswersAsGqlgen) for a small fraction
// of that.
//
// Each operation is priced before it runs by the answer it would make:
// the fields it asks, counted against the real schema (each type's
// fields, their arguments, and so on), with the count stopping at the
// limit. One priced over MaxIntrospectionFields is refused, so the price
// of pricing is bounded too.
//
// An operation that mixes __schema or __type with other root fields is
// refused (the HTTP edge's admission does it before validation): no
// client needs to, and it would make gqlgen's executor answer introspection again.
//
// Answers of operations without variables are also kept by their text
// (a small cache like the others, see admitcache.Cache): the playground and
// code generators send the same schema query again and again, and then
// pay neither the price nor the writing.
type introspectionAnswers struct {
	model   *schemaModel
	max     int
	mode    IntrospectionMode
	answers *admitcache.Cache[[]byte]
}

// introspectionCacheBytes bounds the kept answers: GraphiQL's is 70 KB.
const introspectionCacheBytes = 1 << 20

func NewIntrospectionAnswers(max int, mode IntrospectionMode) *introspectionAnswers {
	return &introspectionAnswers{max: max, mode: mode, answers: admitcache.New("introspection", introspectionCacheBytes, func(key string, answer []byte) int {
		return len(key) + len(answer)
	})}
}

// answerKey is the key of an operation's kept answer, "" when it has
// variables (its answer may depend on them).
func answerKey(oc *graphql.OperationContext) string {
	if len(oc.Variables) > 0 {
		return ""
	}
	return oc.OperationName + "\x00" + oc.RawQuery
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
	graphql.OperationInterceptor
} = (*introspectionAnswers)(nil)

func (*introspectionAnswers) ExtensionName() string { return "IntrospectionAnswers" }

func (a *introspectionAnswers) Validate(s graphql.ExecutableSchema) error {
	a.model = newSchemaModel(s.Schema())
	return nil
}

// MutateOperationContext prices an introspection operation, after
// validation and before anything runs, and lets gqlgen's executor see it
// as introspection (its own switch, which the model does not need).
func (a *introspectionAnswers) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if a.mode != IntrospectionOff {
		oc.DisableIntrospection = false
	}
	root, ok := a.introspectionRoot(oc)
	if !ok {
		return nil
	}
	if key := answerKey(oc); key != "" {
		if _, ok := a.answers.Get(context.Background(), key); ok {
			return nil // priced when it was answered
		}
	}
	w := &introWriter{oc: oc, m: a.model, max: a.max}
	w.query(root)
	if w.over {
		introspectionTotal.WithLabelValues("refused").Inc()
		return ShapeError("INTROSPECTION_TOO_LARGE", "the introspection answer would have more than %d fields: ask for fewer", a.max)
	}
	oc.Stats.SetExtension(IntrospectionFieldsStat, w.n)
	return nil
}

// IntrospectionFieldsStat names the operation's statistic that holds the
// price of an introspection operation, in fields of its answer, for the
// cost budget (httpapi), which charges a point per
// IntrospectionFieldsPerPoint of them: gqlgen's complexity counts a list
// field once, however many types or fields the schema has.
const IntrospectionFieldsStat = "introspection-fields"

// IntrospectionFieldsPerPoint is how many fields of an introspection
// answer cost one point of the budget: the model writes one in about
// 0.5 µs, a quarter of a data field.
const IntrospectionFieldsPerPoint = 4

// InterceptOperation answers an introspection operation from the model.
func (a *introspectionAnswers) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	root, ok := a.introspectionRoot(oc)
	if !ok {
		return next(ctx)
	}
	key := answerKey(oc)
	if key != "" {
		if data, ok := a.answers.Get(ctx, key); ok {
			introspectionTotal.WithLabelValues("kept").Inc()
			return graphql.OneShot(&graphql.Response{Data: json.RawMessage(data)})
		}
	}
	w := &introWriter{oc: oc, m: a.model, max: a.max, buf: new(bytes.Buffer)}
	w.query(root)
	if w.over { // priced within the limit: cannot happen
		return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{ShapeError("INTROSPECTION_TOO_LARGE", "the introspection answer would have more than %d fields: ask for fewer", a.max)}})
	}
	introspectionTotal.WithLabelValues("answered").Inc()
	data := w.buf.Bytes()
	if key != "" {
		a.answers.Add(ctx, key, data)
	}
	return graphql.OneShot(&graphql.Response{Data: json.RawMessage(data)})
}

// introspectionRoot returns the root fields of a query that asks only
// introspection, at least one of __schema and __type among them, as
// gqlgen collects them (fragments merged, @skip and @include applied).
func (a *introspectionAnswers) introspectionRoot(oc *graphql.OperationContext) ([]graphql.CollectedField, bool) {
	if oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Query || a.model == nil {
		return nil, false
	}
	fields := graphql.CollectFields(oc, oc.Operation.SelectionSet, queryImplementors)
	asks := false
	for _, f := range fields {
		switch f.Name {
		case "__schema", "__type":
			asks = true
		case "__typename":
		default:
			return nil, false
		}
		if len(f.Deferrables) > 0 {
			return nil, false
		}
	}
	return fields, asks
}

// introspectionTotal counts introspection operations by outcome:
// answered (written from the model), kept (the answer kept for the same
// text), refused (by their price).
var introspectionTotal = metrics.CounterVec("graphql_introspection_total", "Introspection operations: answered from the schema model, answered with the answer kept for the same text, or refused by their price.", "outcome")

// schemaModel is the schema as introspection shows it, computed once:
// gqlgen's own introspection types, so every value is the one its
// executor would show, with each list a type's fields, values, inputs,
// interfaces and possible types kept instead of rebuilt per request.
type schemaModel struct {
	schema     *introspection.Schema
	types      []introspection.Type
	directives []introspection.Directive
	named      map[string]*typeLists
	byName     map[string]*introspection.Type
}

// typeLists are a named type's lists; index 1 of fields and enumValues
// is with the deprecated ones included.
type typeLists struct {
	fields        [2][]introspection.Field
	enumValues    [2][]introspection.EnumValue
	inputFields   []introspection.InputValue
	interfaces    []introspection.Type
	possibleTypes []introspection.Type
}

// wrapperLists are those of a list or non-null wrapper: empty, as gqlgen
// gives them.
var wrapperLists = &typeLists{
	fields:        [2][]introspection.Field{{}, {}},
	enumValues:    [2][]introspection.EnumValue{{}, {}},
	inputFields:   []introspection.InputValue{},
	interfaces:    []introspection.Type{},
	possibleTypes: []introspection.Type{},
}

func newSchemaModel(s *ast.Schema) *schemaModel {
	m := &schemaModel{schema: introspection.WrapSchema(s), named: map[string]*typeLists{}, byName: map[string]*introspection.Type{}}
	m.types = m.schema.Types()
	m.directives = m.schema.Directives()
	for i := range m.types {
		t := &m.types[i]
		m.byName[*t.Name()] = t
		m.named[*t.Name()] = &typeLists{
			fields:        [2][]introspection.Field{t.Fields(false), t.Fields(true)},
			enumValues:    [2][]introspection.EnumValue{t.EnumValues(false), t.EnumValues(true)},
			inputFields:   t.InputFields(),
			interfaces:    t.Interfaces(),
			possibleTypes: t.PossibleTypes(),
		}
	}
	return m
}

func (m *schemaModel) lists(t *introspection.Type) *typeLists {
	if name := t.Name(); name != nil {
		if l := m.named[*name]; l != nil {
			return l
		}
	}
	return wrapperLists
}

// Each object's fields are collected for the implementors gqlgen's
// generated code uses (queryImplementors, __TypeImplementors, ...).
const includeDeprecatedArgKey = "includeDeprecated"

// introWriter writes an introspection answer as gqlgen's field sets
// marshal it, or, with no buffer, only counts it. n counts the fields
// written; past max it stops and sets over.
type introWriter struct {
	oc   *graphql.OperationContext
	m    *schemaModel
	buf  *bytes.Buffer // nil: count only
	n    int
	max  int
	over bool
	// collected and deprecated remember, per selection, what every
	// object it is asked of shares: its collected fields and its
	// includeDeprecated argument (gqlgen's own cache of collected fields
	// allocates a key per call).
	collected  map[collectKey][]graphql.CollectedField
	deprecated map[*ast.Field]int
}

// collectKey names a selection set collected for one type.
type collectKey struct {
	first *ast.Selection
	n     int
	typ   string
}

func (w *introWriter) raw(s string) {
	if w.buf != nil {
		w.buf.WriteString(s)
	}
}

func (w *introWriter) str(s string) {
	if w.buf != nil {
		graphql.MarshalString(s).MarshalGQL(w.buf)
	}
}

func (w *introWriter) optStr(s *string) {
	if s == nil {
		w.raw("null")
		return
	}
	w.str(*s)
}

func (w *introWriter) boolean(b bool) {
	if b {
		w.raw("true")
	} else {
		w.raw("false")
	}
}

// object writes the fields of sel collected for an object of type
// implementors[0], value writing each field's value.
func (w *introWriter) object(sel ast.SelectionSet, implementors []string, value func(f graphql.CollectedField)) {
	var fields []graphql.CollectedField
	if len(sel) > 0 {
		k := collectKey{first: &sel[0], n: len(sel), typ: implementors[0]}
		var ok bool
		if fields, ok = w.collected[k]; !ok {
			fields = graphql.CollectFields(w.oc, sel, implementors)
			if w.collected == nil {
				w.collected = map[collectKey][]graphql.CollectedField{}
			}
			w.collected[k] = fields
		}
	}
	w.fieldSet(fields, implementors[0], value)
}

func (w *introWriter) fieldSet(fields []graphql.CollectedField, typeName string, value func(f graphql.CollectedField)) {
	w.raw("{")
	for i, f := range fields {
		if w.n++; w.n > w.max {
			w.over = true
			return
		}
		if i > 0 {
			w.raw(",")
		}
		w.str(f.Alias)
		w.raw(":")
		if f.Name == "__typename" {
			w.str(typeName)
		} else {
			value(f)
		}
		if w.over {
			return
		}
	}
	w.raw("}")
}

// list writes n items, item writing the i-th.
func (w *introWriter) list(n int, item func(i int)) {
	w.raw("[")
	for i := range n {
		if i > 0 {
			w.raw(",")
		}
		item(i)
		if w.over {
			return
		}
	}
	w.raw("]")
}

func (w *introWriter) includeDeprecated(f graphql.CollectedField) int {
	if len(f.Arguments) == 0 {
		return 0 // the argument's default, false
	}
	if i, ok := w.deprecated[f.Field]; ok {
		return i
	}
	i := 0
	if b, _ := f.ArgumentMap(w.oc.Variables)[includeDeprecatedArgKey].(bool); b {
		i = 1
	}
	if w.deprecated == nil {
		w.deprecated = map[*ast.Field]int{}
	}
	w.deprecated[f.Field] = i
	return i
}

// query writes the operation's root: __schema, __type and __typename.
func (w *introWriter) query(root []graphql.CollectedField) {
	w.fieldSet(root, "Query", func(f graphql.CollectedField) {
		switch f.Name {
		case "__schema":
			w.schema(f.Selections)
		case "__type":
			name, _ := f.ArgumentMap(w.oc.Variables)["name"].(string)
			w.typ(f.Selections, w.m.byName[name]) // nil (null) when unknown
		}
	})
}

func (w *introWriter) schema(sel ast.SelectionSet) {
	s := w.m.schema
	w.object(sel, __SchemaImplementors, func(f graphql.CollectedField) {
		switch f.Name {
		case "description":
			w.optStr(s.Description())
		case "types":
			w.list(len(w.m.types), func(i int) { w.typ(f.Selections, &w.m.types[i]) })
		case "queryType":
			w.typ(f.Selections, s.QueryType())
		case "mutationType":
			w.typ(f.Selections, s.MutationType())
		case "subscriptionType":
			w.typ(f.Selections, s.SubscriptionType())
		case "directives":
			w.list(len(w.m.directives), func(i int) { w.directive(f.Selections, &w.m.directives[i]) })
		default:
			w.raw("null")
		}
	})
}

func (w *introWriter) typ(sel ast.SelectionSet, t *introspection.Type) {
	if t == nil {
		w.raw("null")
		return
	}
	l := w.m.lists(t)
	w.object(sel, __TypeImplementors, func(f graphql.CollectedField) {
		switch f.Name {
		case "kind":
			w.str(t.Kind())
		case "name":
			w.optStr(t.Name())
		case "description":
			w.optStr(t.Description())
		case "specifiedByURL":
			w.optStr(t.SpecifiedByURL())
		case "fields":
			fields := l.fields[w.includeDeprecated(f)]
			w.list(len(fields), func(i int) { w.field(f.Selections, &fields[i]) })
		case "interfaces":
			w.list(len(l.interfaces), func(i int) { w.typ(f.Selections, &l.interfaces[i]) })
		case "possibleTypes":
			w.list(len(l.possibleTypes), func(i int) { w.typ(f.Selections, &l.possibleTypes[i]) })
		case "enumValues":
			values := l.enumValues[w.includeDeprecated(f)]
			w.list(len(values), func(i int) { w.enumValue(f.Selections, &values[i]) })
		case "inputFields":
			w.list(len(l.inputFields), func(i int) { w.inputValue(f.Selections, &l.inputFields[i]) })
		case "ofType":
			w.typ(f.Selections, t.OfType())
		case "isOneOf":
			w.boolean(t.IsOneOf())
		default:
			w.raw("null")
		}
	})
}

func (w *introWriter) field(sel ast.SelectionSet, fd *introspection.Field) {
	w.object(sel, __FieldImplementors, func(f graphql.CollectedField) {
		switch f.Name {
		case "name":
			w.str(fd.Name)
		case "description":
			w.optStr(fd.Description())
		case "args":
			w.list(len(fd.Args), func(i int) { w.inputValue(f.Selections, &fd.Args[i]) })
		case "type":
			w.typ(f.Selections, fd.Type)
		case "isDeprecated":
			w.boolean(fd.IsDeprecated())
		case "deprecationReason":
			w.optStr(fd.DeprecationReason())
		default:
			w.raw("null")
		}
	})
}

func (w *introWriter) inputValue(sel ast.SelectionSet, v *introspection.InputValue) {
	w.object(sel, __InputValueImplementors, func(f graphql.CollectedField) {
		switch f.Name {
		case "name":
			w.str(v.Name)
		case "description":
			w.optStr(v.Description())
		case "type":
			w.typ(f.Selections, v.Type)
		case "defaultValue":
			w.optStr(v.DefaultValue)
		case "isDeprecated":
			w.boolean(v.IsDeprecated())
		case "deprecationReason":
			w.optStr(v.DeprecationReason())
		default:
			w.raw("null")
		}
	})
}

func (w *introWriter) enumValue(sel ast.SelectionSet, v *introspection.EnumValue) {
	w.object(sel, __EnumValueImplementors, func(f graphql.CollectedField) {
		switch f.Name {
		case "name":
			w.str(v.Name)
		case "description":
			w.optStr(v.Description())
		case "isDeprecated":
			w.boolean(v.IsDeprecated())
		case "deprecationReason":
			w.optStr(v.DeprecationReason())
		default:
			w.raw("null")
		}
	})
}

func (w *introWriter) directive(sel ast.SelectionSet, d *introspection.Directive) {
	w.object(sel, __DirectiveImplementors, func(f graphql.CollectedField) {
		switch f.Name {
		case "name":
			w.str(d.Name)
		case "description":
			w.optStr(d.Description())
		case "locations":
			w.list(len(d.Locations), func(i int) { w.str(d.Locations[i]) })
		case "args":
			w.list(len(d.Args), func(i int) { w.inputValue(f.Selections, &d.Args[i]) })
		case "isRepeatable":
			w.boolean(d.IsRepeatable)
		default:
			w.raw("null")
		}
	})
}

// IntrospectionRefusal is the answer, for the HTTP edge's admission, to
// __schema or __type that the mode or the operation's other fields rule
// out, or nil.
func IntrospectionRefusal(mode IntrospectionMode, fields []*ast.Field, authenticated bool) *domain.Error {
	asks, other := false, false
	for _, f := range fields {
		switch {
		case f.Name == "__schema" || f.Name == "__type":
			asks = true
		case f.Name != "__typename":
			other = true
		}
	}
	switch {
	case !asks:
		return nil
	case mode == IntrospectionOff:
		return domain.Errorf(domain.CodeForbidden, "schema introspection is switched off on this service")
	case other:
		return domain.Errorf(domain.CodeBadInput, "ask for __schema and __type in an operation of their own")
	case mode == IntrospectionToken && !authenticated:
		return domain.Errorf(domain.CodeUnauthenticated, "schema introspection needs a valid token")
	}
	return nil
}
