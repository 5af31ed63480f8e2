package graph

import (
	"context"
	"errors"
	"strings"

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
	"setWaitingRoom":     true,
	"block":              true,
	"unblock":            true,
	"blocks":             true,
	"saleStats":          true,
	"userOrders":         true,
	"clusterNodes":       true,
}

// GrabField is the hot-path mutation; an operation may hold one.
const GrabField = "seckillVoucher"

// RedPacketGrabField is the red packets' grab: like GrabField, limited by
// its own rules (one packet per user), never by the caller's reads.
const RedPacketGrabField = "grabRedPacket"

// OperationPolicy decides whether an operation may run at all, before any
// resolver does: authorization, then one grab per operation, over one walk
// of the root fields of the validated operation. (The per-IP limits and a
// first token check run before parsing, in the HTTP edge's admission.)
// Checking per root field instead let a user's grab run and then fail the
// whole mutation on a later admin field (data null, the order id lost),
// and a missing token produced null inside non-null fields. Over a websocket the identity
// comes from connection_init and is re-checked (expiry included) for every
// operation.
type OperationPolicy struct{}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = OperationPolicy{}

func (OperationPolicy) ExtensionName() string                   { return "OperationPolicy" }
func (OperationPolicy) Validate(graphql.ExecutableSchema) error { return nil }

func (OperationPolicy) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	fields := RootFields(oc.Operation.SelectionSet, map[string]bool{})
	if err := authorize(ctx, oc.Operation.Operation, fields); err != nil {
		return OperationError(err)
	}
	if err := oneGrab(oc.Operation.Operation, fields); err != nil {
		return OperationError(err)
	}
	return nil
}

// authorize needs a valid token unless every root field is introspection,
// and the admin role for an admin field anywhere in the operation.
func authorize(ctx context.Context, op ast.Operation, fields []*ast.Field) *domain.Error {
	if IntrospectionOnly(fields) {
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
		return AsDomainError(err)
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
		if f.Name != GrabField {
			continue
		}
		if first == "" {
			first = f.Alias
		} else if f.Alias != first {
			return domain.Errorf(domain.CodeBadInput, "at most one %s per request: send each grab as its own request", GrabField)
		}
	}
	return nil
}

// AsDomainError keeps a client-facing error as it is; auth only returns
// those, but anything else must not reach the client as such.
func AsDomainError(err error) *domain.Error {
	var de *domain.Error
	if errors.As(err, &de) {
		return de
	}
	return domain.ErrUnauthenticated
}

// RootFields flattens the fragments of the operation's top level.
func RootFields(set ast.SelectionSet, seen map[string]bool) []*ast.Field {
	var out []*ast.Field
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			out = append(out, s)
		case *ast.InlineFragment:
			out = append(out, RootFields(s.SelectionSet, seen)...)
		case *ast.FragmentSpread:
			if s.Definition != nil && !seen[s.Name] {
				seen[s.Name] = true
				out = append(out, RootFields(s.Definition.SelectionSet, seen)...)
			}
		}
	}
	return out
}

// IntrospectionOnly reports whether every root field is introspection
// (__schema, __type, __typename): the one kind of operation that needs no
// token, so the playground can show the schema before a token is pasted.
func IntrospectionOnly(fields []*ast.Field) bool {
	for _, f := range fields {
		if !strings.HasPrefix(f.Name, "__") {
			return false
		}
	}
	return true
}
