package model

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"flashsale/domain"
)

// FuzzUnmarshalID feeds the ID scalar what a client can send: a string, a
// JSON number and an integer. It must never panic, refuse only with
// BAD_USER_INPUT, accept only positive ids, and what it accepts must write
// back (MarshalID) as the id it read.
func FuzzUnmarshalID(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string, n int64) {
		for _, in := range []any{s, json.Number(s), n} {
			id, err := UnmarshalID(in)
			if err != nil {
				if code := domain.ErrorCode(err); code != domain.CodeBadInput {
					t.Fatalf("UnmarshalID(%#v): code %s (%v), want %s", in, code, err, domain.CodeBadInput)
				}
				continue
			}
			if id <= 0 {
				t.Fatalf("UnmarshalID(%#v) accepted %d", in, id)
			}
			var out bytes.Buffer
			MarshalID(id).MarshalGQL(&out)
			back, err := strconv.Unquote(out.String())
			if err != nil {
				t.Fatalf("MarshalID(%d) wrote %s, not a string", id, out.String())
			}
			if again, err := UnmarshalID(back); err != nil || again != id {
				t.Fatalf("%d written as %s reads back as %d, %v", id, back, again, err)
			}
		}
	})
}
