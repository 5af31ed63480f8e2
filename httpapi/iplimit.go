package httpapi

import (
	"context"
	"time"

	"flashsale/domain"
	"flashsale/internal/auth"
)

// IPLimiter is the per-IP request limit (RATE_IP_PER_SEC), shared by all
// nodes (persistence.RateLimits).
type IPLimiter interface {
	IPEnabled() bool
	AllowIP(ctx context.Context, ip string) (time.Duration, error)
}

// limitIP applies the per-IP limit before the operation is parsed (see
// admission), and before authentication, so that a flood of bad tokens or
// of expensive texts from one address is limited too. Grabs known from
// the query cache skip it: they draw on the same per-IP budget inside
// their voucher actor, one pipelined check per batch, and those answered
// from memory (sold out, not started, ended) are free by design: the hot
// path must not pay a Redis round trip per request. A grab whose text
// this node has not seen yet pays here, as every other operation does.
//
// When Redis cannot answer, the operation goes ahead: the limit protects
// the service, and refusing every request while Redis is down protects
// nothing (SHED_IP_PER_SEC, in process, still holds then).
func (a admission) limitIP(ctx context.Context) *domain.Error {
	if a.ipLimit == nil || !a.ipLimit.IPEnabled() {
		return nil
	}
	wait, err := a.ipLimit.AllowIP(ctx, auth.ClientIP(ctx))
	if err != nil {
		a.log.WarnContext(ctx, "per-IP limit unavailable; request admitted", "err", err)
		return nil
	}
	if wait > 0 {
		return domain.RateLimited(wait)
	}
	return nil
}
