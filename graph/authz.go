package graph

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"

	"flashsale/domain"
	"flashsale/internal/auth"
)

// adminFields are the root fields that need the admin role. Every other
// root field needs a valid token of either role; introspection needs none,
// so the playground can show the schema before a token is pasted.
var adminFields = map[string]bool{
	"createVoucher":    true,
	"setVoucherStatus": true,
	"addStock":         true,
}

// authorize is the root-field middleware that enforces authentication and
// roles before any resolver runs, for queries, mutations and subscriptions.
func authorize(ctx context.Context, next graphql.RootResolver) graphql.Marshaler {
	fc := graphql.GetRootFieldContext(ctx)
	if fc == nil || strings.HasPrefix(fc.Field.Name, "__") {
		return next(ctx)
	}
	id, err := auth.FromContext(ctx)
	if err == nil && adminFields[fc.Field.Name] && !id.IsAdmin() {
		err = domain.ErrForbidden
	}
	if err != nil {
		graphql.AddError(ctx, err)
		return graphql.Null
	}
	return next(ctx)
}
