package model

import (
	"io"
	"strconv"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"flashsale/domain"
)

// MarshalTime writes a time as RFC 3339 with nanoseconds, in UTC.
func MarshalTime(t time.Time) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		_, _ = io.WriteString(w, strconv.Quote(t.UTC().Format(time.RFC3339Nano)))
	})
}

// UnmarshalTime accepts an RFC 3339 string; anything else is bad input
// (a domain error, so clients get BAD_USER_INPUT rather than INTERNAL).
func UnmarshalTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, domain.Errorf(domain.CodeBadInput, "invalid time: want an RFC 3339 string such as 2026-01-02T15:04:05Z")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, domain.Errorf(domain.CodeBadInput, "invalid time %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", truncate(s, 40))
	}
	return t, nil
}
