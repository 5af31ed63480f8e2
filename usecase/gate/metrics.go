package gate

import (
	"github.com/prometheus/client_golang/prometheus"

	"flashsale/internal/metrics"
)

// Refusal reasons, the label of flashsale_gate_refusals_total.
const (
	reasonBlocked        = "blocked"
	reasonTicketMissing  = "ticket_missing"
	reasonTicketInvalid  = "ticket_invalid"
	reasonTicketExpired  = "ticket_expired"
	reasonNotReleased    = "not_released"
	reasonEnded          = "ended"
	reasonChallengeWrong = "challenge_wrong"
	reasonChallengeUsed  = "challenge_used"
)

// refusals counts the grabs and ticket requests the gate refused, by why.
var refusals = metrics.CounterVec("gate_refusals_total", "Grabs and ticket or challenge requests refused by the grab gate (blocklist, ticket, challenge), by reason.", "reason")

// refused holds each reason's series, looked up once (not by label per call).
var refusedSeries = map[string]prometheus.Counter{}

func init() {
	for _, r := range []string{reasonBlocked, reasonTicketMissing, reasonTicketInvalid, reasonTicketExpired,
		reasonNotReleased, reasonEnded, reasonChallengeWrong, reasonChallengeUsed} {
		refusedSeries[r] = refusals.WithLabelValues(r)
	}
}

func refused(reason string) { refusedSeries[reason].Inc() }
