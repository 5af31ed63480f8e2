package model

import (
	"encoding/json"
	"io"
	"strconv"

	"github.com/99designs/gqlgen/graphql"

	"flashsale/domain"
)

// MarshalID writes a 64-bit identifier as a GraphQL ID (a decimal string), so
// that JavaScript clients never lose precision on order ids above 2^53.
func MarshalID(id int64) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		_, _ = io.WriteString(w, strconv.Quote(strconv.FormatInt(id, 10)))
	})
}

// UnmarshalID accepts a positive decimal id given as a string or an integer,
// in its one canonical spelling: "+1", "01" or " 1" would name the same
// voucher as "1" and so defeat any check, cache or log keyed by the text.
// Anything else is bad input; the message names no internals.
func UnmarshalID(v any) (int64, error) {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case int64:
		s = strconv.FormatInt(x, 10)
	case int:
		s = strconv.Itoa(x)
	case json.Number:
		s = x.String()
	default:
		return 0, domain.Errorf(domain.CodeBadInput, "invalid id: must be a positive decimal integer")
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
		return 0, domain.Errorf(domain.CodeBadInput, "invalid id %q: must be a positive decimal integer", truncate(s, 32))
	}
	return id, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
