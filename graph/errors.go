package graph

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
)

// presentErrors is the one place where errors become GraphQL errors:
//   - a *domain.Error keeps its message and gets its code;
//   - a *gqlerror.Error that wraps no other error is one gqlgen raised about
//     the request itself (parse, validation, complexity, depth):
//     BAD_USER_INPUT, gqlgen's own code kept as extensions.reason (our
//     scalars return *domain.Error, so argument coercion lands above);
//   - anything else is an internal fault: logged with its cause and shown
//     only as "internal error", so no SQL, address or stack ever leaks.
func presentErrors(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		out := graphql.DefaultErrorPresenter(ctx, err)
		var de *domain.Error
		if errors.As(err, &de) {
			out.Message = de.Message
			out.Extensions = map[string]any{"code": string(de.Code)}
			if de.Field != "" {
				out.Extensions["field"] = de.Field
			}
			if de.Code == domain.CodeRateLimited {
				out.Extensions["retryAfterMs"] = max(de.RetryAfter.Milliseconds(), 1)
			}
			return out
		}
		var ge *gqlerror.Error
		if errors.As(err, &ge) && ge.Err == nil {
			ext := map[string]any{"code": string(domain.CodeBadInput)}
			if c, ok := ge.Extensions["code"]; ok {
				ext["reason"] = c
			}
			out.Extensions = ext
			return out
		}
		if errors.Is(err, context.Canceled) {
			return &gqlerror.Error{Message: "request cancelled", Path: out.Path, Extensions: map[string]any{"code": string(domain.CodeInternal)}}
		}
		log.ErrorContext(ctx, "internal error", "err", err, "path", out.Path.String())
		return &gqlerror.Error{Message: "internal error", Path: out.Path, Extensions: map[string]any{"code": string(domain.CodeInternal)}}
	}
}

// recoverPanic turns a resolver panic into an internal error and logs it.
func recoverPanic(log *slog.Logger) graphql.RecoverFunc {
	return func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "resolver panic", "panic", fmt.Sprint(p))
		return errors.New("internal error")
	}
}
