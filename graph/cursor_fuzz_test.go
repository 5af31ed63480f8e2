package graph

import (
	"errors"
	"testing"

	"flashsale/domain"
)

// FuzzDecodeCursor feeds list arguments (first, after) as a client sends
// them to the page decoding of vouchers and myOrders. It must never
// panic, refuse only with BAD_USER_INPUT naming the argument, and a
// cursor it accepts must be one this list could have written.
func FuzzDecodeCursor(f *testing.F) {
	f.Fuzz(func(t *testing.T, kind string, first int, after string) {
		if kind != "order" {
			kind = "voucher"
		}
		page, err := pageFromArgs(kind, &first, &after)
		if err != nil {
			var de *domain.Error
			if !errors.As(err, &de) || de.Code != domain.CodeBadInput {
				t.Fatalf("pageFromArgs(%d, %q): %v, want %s", first, after, err, domain.CodeBadInput)
			}
			if de.Field != "first" && de.Field != "after" {
				t.Fatalf("pageFromArgs(%d, %q): %v names no argument", first, after, err)
			}
			return
		}
		if page.First < 0 || page.First > domain.MaxPageSize || page.After < 0 {
			t.Fatalf("pageFromArgs(%d, %q) = %+v", first, after, page)
		}
		if after == "" {
			return
		}
		if page.After == 0 {
			t.Fatalf("cursor %q accepted as no cursor", after)
		}
		if id, err := decodeCursor(kind, new(encodeCursor(kind, page.After))); err != nil || id != page.After {
			t.Fatalf("cursor of %d reads back as %d, %v", page.After, id, err)
		}
	})
}
