package graph_test

import (
	"strings"
	"testing"

	"flashsale/internal/auth"
)

// Numbers out of an argument's range are refused with a message that
// says what is wanted and, where it can, what was given: an Int variable
// holding 1e300 or 2.5 (gqlparser's own message says "cannot use value 0
// as Int"), and a negative red-packet expiry (said "got 0").
func TestOutOfRangeNumbersGetClearMessages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	const page = `query($f: Int) { vouchers(first: $f) { pageInfo { hasNextPage } } }`
	const packet = `mutation($in: CreateRedPacketInput!) { createRedPacket(input: $in) { id } }`
	for _, tc := range []struct {
		name, query string
		vars        map[string]any
		want        string
	}{
		{"first: 1e300 in a variable", page, map[string]any{"f": 1e300}, "variable $f must be an integer, written in digits without a fraction or an exponent"},
		{"first: 2.5 in a variable", page, map[string]any{"f": 2.5}, "variable $f must be an integer"},
		{"first: 1e300 in the query", `{ vouchers(first: 1e300) { pageInfo { hasNextPage } } }`, nil, "Int cannot represent non-integer value: 1e300"},
		{"first: 1000", `{ vouchers(first: 1000) { pageInfo { hasNextPage } } }`, nil, "first: must be between 0 and 100"},
		{"count: 1e300 inside an input variable", packet, map[string]any{"in": map[string]any{"totalCents": 100, "count": 1e300}}, "variable $in.count must be an integer"},
		{"expiresInSeconds: -1", packet, map[string]any{"in": map[string]any{"totalCents": 100, "count": 1, "expiresInSeconds": -1}}, "expiresInSeconds: must be 1 .. 604800 seconds, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := s.do(t, user, tc.query, tc.vars, nil)
			if len(errs) != 1 || errs[0].code() != "BAD_USER_INPUT" || !strings.HasPrefix(errs[0].Message, tc.want) {
				t.Fatalf("errors %+v, want one BAD_USER_INPUT saying %q", errs, tc.want)
			}
		})
	}
}
