package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"flashsale/domain"
	"flashsale/internal/auth"
)

// printDemo makes the service usable in one command: it creates a demo
// seckill voucher if there is none and prints tokens and a first query.
func (a *app) printDemo(ctx context.Context, w io.Writer) error {
	vs, _, err := a.catalog.List(ctx, nil, domain.Page{First: 1})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	var id int64
	if len(vs) > 0 {
		id = vs[0].ID
	} else {
		stock, limit := 100, 1
		begin := time.Now().Add(-time.Minute)
		end := begin.Add(7 * 24 * time.Hour)
		sub := "100 units, one per person"
		v, err := a.catalog.Create(ctx, domain.NewVoucher{
			ShopID: 1, Title: "Demo flash-sale voucher", SubTitle: &sub,
			PayValue: 990, ActualValue: 5000, Type: domain.VoucherSeckill,
			Stock: &stock, BeginAt: &begin, EndAt: &end, PerUserLimit: &limit,
		})
		if err != nil {
			return fmt.Errorf("demo voucher: %w", err)
		}
		id = v.ID
	}
	// As long as tokens may live (JWT_MAX_TTL): a restart prints new ones.
	ttl := a.tokens.MaxTTL()
	admin, err := a.tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, ttl)
	if err != nil {
		return err
	}
	user, err := a.tokens.Issue(auth.Identity{UserID: 1001, Role: auth.RoleUser}, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, `
Flash-sale voucher service (embedded mode: in-process Redis, SQLite file %s)

  Playground:  http://%s/
  Admin token: %s
  User token:  %s

In the playground, set the header {"Authorization": "Bearer <token>"} and try:
  query { voucher(id: "%d") { id title seckill { remaining initialStock } } }
  query { stock(voucherId: "%d") { remaining sold soldOut } }

`, a.cfg.SQLitePath, displayAddr(a.listener.Addr()), admin, user, id, id)
	return nil
}
