package graph

import (
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// StrictEnums refuses an enum value given in a variable in another case
// than the schema's ("paused" for PAUSED), as the bad input it is.
// gqlparser's variable validation compares enum values without case, so
// such a value passes it, and gqlgen's generated unmarshaler then fails
// with a plain error that the presenter can only call INTERNAL. Values
// written in the query itself are checked exactly by validation already.
type StrictEnums struct {
	schema *ast.Schema
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = (*StrictEnums)(nil)

func (*StrictEnums) ExtensionName() string { return "StrictEnums" }

func (e *StrictEnums) Validate(s graphql.ExecutableSchema) error {
	e.schema = s.Schema()
	return nil
}

func (e *StrictEnums) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	for _, def := range oc.Operation.VariableDefinitions {
		path := ast.Path{ast.PathName("variable"), ast.PathName(def.Variable)}
		if err := e.check(def.Type, oc.Variables[def.Variable], path); err != nil {
			return err
		}
	}
	return nil
}

// check walks a variable's value along its type: lists, input objects and
// enums (variables are already coerced, so the shapes are right).
func (e *StrictEnums) check(typ *ast.Type, v any, path ast.Path) *gqlerror.Error {
	if v == nil || typ == nil {
		return nil
	}
	if typ.Elem != nil {
		items, ok := v.([]any)
		if !ok { // a single value stands for a list of one
			return e.check(typ.Elem, v, path)
		}
		for i, item := range items {
			if err := e.check(typ.Elem, item, append(path, ast.PathIndex(i))); err != nil {
				return err
			}
		}
		return nil
	}
	def := e.schema.Types[typ.NamedType]
	if def == nil {
		return nil
	}
	switch def.Kind {
	case ast.Enum:
		if s, ok := v.(string); ok && def.EnumValues.ForName(s) == nil {
			err := gqlerror.ErrorPathf(path, "%s is not a valid %s (enum values are case-sensitive)", fmt.Sprintf("%q", s), def.Name)
			errcode.Set(err, errcode.ValidationFailed)
			return err
		}
	case ast.InputObject:
		fields, _ := v.(map[string]any)
		for _, f := range def.Fields {
			if fv, ok := fields[f.Name]; ok {
				if err := e.check(f.Type, fv, append(path, ast.PathName(f.Name))); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
