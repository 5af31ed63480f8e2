package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"flashsale/domain"
	"flashsale/internal/node/nodetest"
)

// withLongTexts fills n's catalog with count vouchers whose subTitle and
// rules are as long as allowed: the worst case for an answer's size.
func withLongTexts(tb testing.TB, n *nodetest.Node, count int) {
	tb.Helper()
	text := strings.Repeat("x", domain.MaxTextLen)
	for i := range count {
		_, err := n.Catalog.Create(context.Background(), domain.NewVoucher{
			ShopID: 7, Title: fmt.Sprintf("voucher %d", i), SubTitle: &text, Rules: &text,
			PayValue: 100, ActualValue: 500, Type: domain.VoucherNormal,
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}
