-- The order writer's per-order tables lose their foreign keys to
-- tb_voucher (Postgres only). Postgres checks a foreign key row
-- by row, with one query and one row lock each: three per stored order
-- (the order, its user's live-order counter, its ledger row), measured at
-- about a third of the database CPU an order costs (docs/BENCHMARKS.md,
-- "What one order costs"). The writer locks each voucher's
-- tb_seckill_voucher row (which keeps its own key) before it inserts, and
-- dead-letters an order of a voucher without one as unknown_voucher, as
-- the key did; no path deletes a voucher. SQLite keeps its keys: it
-- cannot drop one without rebuilding the table, and the embedded mode
-- does not carry a rush.
--
-- This file is a Go template (persistence.Migrate passes .Postgres).
{{- if .Postgres}}
ALTER TABLE tb_voucher_order DROP CONSTRAINT IF EXISTS tb_voucher_order_voucher_id_fkey;

--bun:split
ALTER TABLE tb_voucher_user DROP CONSTRAINT IF EXISTS tb_voucher_user_voucher_id_fkey;

--bun:split
ALTER TABLE tb_stock_ledger DROP CONSTRAINT IF EXISTS tb_stock_ledger_voucher_id_fkey;
{{- else}}
SELECT 1;
{{- end}}
