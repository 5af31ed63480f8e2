package graph

import (
	"context"
	"fmt"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
)

// variableTypeMessage rewrites gqlparser's messages about a variable's
// value that does not fit its declared type, which name Go's types and
// leave the variable to the error's path: "cannot use map as ID" and
// "cannot be null" at ["variable","orderId"] become "variable $orderId:
// expected an ID (string), got an object" and "... got null". The
// declared type is read from the operation (the error is raised while
// the operation's variables are coerced, so its context holds the
// parsed document); a field of an input variable is described from the
// input type's definition when the document has it.
func variableTypeMessage(ctx context.Context, msg string, path ast.Path) (string, bool) {
	if len(path) < 2 || path[0] != ast.PathName("variable") {
		return "", false
	}
	name := variablePath(path[1:])
	want := describeType(declaredType(ctx, path[1:]))
	got := ""
	switch {
	case msg == "cannot be null":
		got = "null"
	case msg == "must be defined":
		got = "nothing, and it is required"
	case msg == "unknown field":
		return capMessage(fmt.Sprintf("variable $%s: the input type has no such field", name)), true
	case strings.HasPrefix(msg, "cannot use ") && strings.Count(msg, " ") == 4:
		// "cannot use <Go kind> as <type>"
		f := strings.Fields(msg)
		got = jsonKind(f[2])
		if want == "" {
			want = describeType(&ast.Type{NamedType: f[4]})
		}
	case strings.HasPrefix(msg, "must be a ") && strings.Contains(msg, ", not a "):
		// "must be a <input type>, not a <Go kind>"
		typ, kind, _ := strings.Cut(strings.TrimPrefix(msg, "must be a "), ", not a ")
		got = jsonKind(kind)
		if want == "" {
			want = describeType(&ast.Type{NamedType: typ})
		}
	default:
		return "", false
	}
	if want == "" {
		return capMessage(fmt.Sprintf("variable $%s: got %s, which its type does not allow", name, got)), true
	}
	return capMessage(fmt.Sprintf("variable $%s: expected %s, got %s", name, want, got)), true
}

// variablePath writes a variable's path as the client wrote it:
// in.items[2].count.
func variablePath(path ast.Path) string {
	var b strings.Builder
	for i, p := range path {
		switch p := p.(type) {
		case ast.PathName:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(string(p))
		case ast.PathIndex:
			fmt.Fprintf(&b, "[%d]", int(p))
		}
	}
	return b.String()
}

// declaredType is the type the operation declares at a variable's path,
// or nil when it cannot be known here (a field of a nested input type,
// whose definition the document does not link).
func declaredType(ctx context.Context, path ast.Path) *ast.Type {
	if !graphql.HasOperationContext(ctx) {
		return nil
	}
	oc := graphql.GetOperationContext(ctx)
	if oc == nil || oc.Operation == nil || len(path) == 0 {
		return nil
	}
	first, ok := path[0].(ast.PathName)
	if !ok {
		return nil
	}
	def := oc.Operation.VariableDefinitions.ForName(string(first))
	if def == nil {
		return nil
	}
	typ, inputDef := def.Type, def.Definition
	for _, p := range path[1:] {
		switch p := p.(type) {
		case ast.PathIndex:
			if typ == nil || typ.Elem == nil {
				return nil
			}
			typ = typ.Elem
		case ast.PathName:
			// Only the variable's own input type is linked in the document.
			if inputDef == nil || typ == nil || typ.Elem != nil || typ.NamedType != inputDef.Name {
				return nil
			}
			field := inputDef.Fields.ForName(string(p))
			if field == nil {
				return nil
			}
			typ, inputDef = field.Type, nil
		}
	}
	return typ
}

// describeType names a GraphQL type with the JSON a client sends for it.
func describeType(t *ast.Type) string {
	if t == nil {
		return ""
	}
	if t.Elem != nil {
		if inner := describeType(t.Elem); inner != "" {
			return "a list of " + strings.TrimPrefix(strings.TrimPrefix(inner, "an "), "a ")
		}
		return "a list"
	}
	switch t.NamedType {
	case "ID":
		return "an ID (string)"
	case "String":
		return "a String"
	case "Int":
		return "an Int (integer)"
	case "Float":
		return "a Float (number)"
	case "Boolean":
		return "a Boolean (true or false)"
	case "":
		return ""
	}
	if strings.ContainsRune("AEIOU", rune(t.NamedType[0])) {
		return "an " + t.NamedType
	}
	return "a " + t.NamedType
}

// jsonKind names the JSON a Go kind in gqlparser's message came from
// (variables are decoded with json.Number, a string kind too).
func jsonKind(kind string) string {
	switch kind {
	case "map":
		return "an object"
	case "slice", "array":
		return "a list"
	case "bool":
		return "a boolean"
	case "string":
		return "a string or a number"
	case "float32", "float64", "int", "int32", "int64":
		return "a number"
	}
	return "a " + kind
}
