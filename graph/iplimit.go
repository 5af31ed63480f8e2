package graph

import (
	"context"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"flashsale/domain"
)

// IPLimiter is the per-IP request limit (RATE_IP_PER_SEC), shared by all
// nodes (persistence.RateLimits).
type IPLimiter interface {
	IPEnabled() bool
	AllowIP(ctx context.Context, ip string) (time.Duration, error)
}

// limitIP applies the per-IP limit to every operation but a grab, before
// authentication (so that a flood of bad tokens from one address is
// limited too). Grabs draw on the same per-IP budget inside their voucher
// actor, one pipelined check per batch, and those answered from memory
// (sold out, not started, ended) are free by design: the hot path must not
// pay a Redis round trip per request.
//
// When Redis cannot answer, the operation goes ahead: the limit protects
// the service, and refusing every request while Redis is down protects
// nothing.
func (p operationPolicy) limitIP(ctx context.Context, fields []*ast.Field) *domain.Error {
	if p.ipLimit == nil || !p.ipLimit.IPEnabled() {
		return nil
	}
	for _, f := range fields {
		if f.Name == grabField {
			return nil
		}
	}
	wait, err := p.ipLimit.AllowIP(ctx, clientIP(ctx))
	if err != nil {
		p.log.WarnContext(ctx, "per-IP limit unavailable; request admitted", "err", err)
		return nil
	}
	if wait > 0 {
		return domain.RateLimited(wait)
	}
	return nil
}
