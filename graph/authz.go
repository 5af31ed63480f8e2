package graph

import (
	"context"
	"errors"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/internal/auth"
)

// adminFields are the root fields (of any operation type) that need the
// admin role. Every other root field needs a valid token of either role;
// introspection needs none, so the playground can show the schema before
// a token is pasted.
var adminFields = map[string]bool{
	"createVoucher":      true,
	"setVoucherStatus":   true,
	"setVoucherSegments": true,
	"addStock":           true,
	"deadLetteredOrders": true,
	"reconciliation":     true,
	"reconcile":          true,
	"setVoucherGate":     true,
	"block":              true,
	"unblock":            true,
	"blocks":             true,
}

// grabField is the hot-path mutation; an operation may hold one.
const grabField = "seckillVoucher"

// operationPolicy decides whether an operation may run at all, before any
// resolver does: authorization, then one grab per operation, over one walk
// of the root fields of the validated operation. (The per-IP limits and a
// first token check run before parsing, in admission.) Checking per root
// field instead let a user's grab run and then fail the whole mutation on
// a later admin field (data null, the order id lost), and a missing token
// produced null inside non-null fields. Over a websocket the identity
// comes from connection_init and is re-checked (expiry included) for every
// operation.
type operationPolicy struct{}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = operationPolicy{}

func (operationPolicy) ExtensionName() string                   { return "OperationPolicy" }
func (operationPolicy) Validate(graphql.ExecutableSchema) error { return nil }

func (operationPolicy) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	fields := rootFields(oc.Operation.SelectionSet, map[string]bool{})
	if err := authorize(ctx, oc.Operation.Operation, fields); err != nil {
		return operationError(err)
	}
	if err := oneGrab(oc.Operation.Operation, fields); err != nil {
		return operationError(err)
	}
	return nil
}

// authorize needs a valid token unless every root field is introspection,
// and the admin role for an admin field anywhere in the operation.
func authorize(ctx context.Context, op ast.Operation, fields []*ast.Field) *domain.Error {
	if introspectionOnly(fields) {
		return nil
	}
	needsAdmin := false
	for _, f := range fields {
		if adminFields[f.Name] {
			needsAdmin = true
		}
	}
	id, err := auth.FromContext(ctx)
	if err != nil {
		return asDomainError(err)
	}
	if needsAdmin && !id.IsAdmin() {
		return domain.ErrForbidden
	}
	return nil
}

// oneGrab allows at most one seckillVoucher per operation: with several,
// one RATE_LIMITED grab nulls the whole data (the field is non-null) and
// the others' order ids are lost although their orders stand. Fields
// sharing a response key are merged by GraphQL into one execution, so
// they count once.
func oneGrab(op ast.Operation, fields []*ast.Field) *domain.Error {
	if op != ast.Mutation {
		return nil
	}
	first := ""
	for _, f := range fields {
		if f.Name != grabField {
			continue
		}
		if first == "" {
			first = f.Alias
		} else if f.Alias != first {
			return domain.Errorf(domain.CodeBadInput, "at most one %s per request: send each grab as its own request", grabField)
		}
	}
	return nil
}

// asDomainError keeps a client-facing error as it is; auth only returns
// those, but anything else must not reach the client as such.
func asDomainError(err error) *domain.Error {
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	return domain.ErrUnauthenticated
}
