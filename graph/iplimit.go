package graph

import (
	"context"
	"log/slog"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
)

// IPLimiter is the per-IP request limit (RATE_IP_PER_SEC), shared by all
// nodes (persistence.RateLimits).
type IPLimiter interface {
	IPEnabled() bool
	AllowIP(ctx context.Context, ip string) (time.Duration, error)
}

// ipLimit applies the per-IP limit to every operation but a grab, before
// the operation runs (and before authentication, so that a flood of bad
// tokens from one address is limited too). Grabs draw on the same per-IP
// budget inside their voucher actor, one pipelined check per batch, and
// those answered from memory (sold out, not started, ended) are free by
// design: the hot path must not pay a Redis round trip per request.
//
// When Redis cannot answer, the operation goes ahead: the limit protects
// the service, and refusing every request while Redis is down protects
// nothing.
type ipLimit struct {
	limiter IPLimiter
	log     *slog.Logger
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = ipLimit{}

func (ipLimit) ExtensionName() string                   { return "IPLimit" }
func (ipLimit) Validate(graphql.ExecutableSchema) error { return nil }

func (l ipLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil || !l.limiter.IPEnabled() {
		return nil
	}
	for _, f := range rootFields(oc.Operation.SelectionSet, map[string]bool{}) {
		if f.Name == grabField {
			return nil
		}
	}
	wait, err := l.limiter.AllowIP(ctx, clientIP(ctx))
	if err != nil {
		l.log.WarnContext(ctx, "per-IP limit unavailable; request admitted", "err", err)
		return nil
	}
	if wait > 0 {
		return operationError(domain.RateLimited(wait))
	}
	return nil
}
