-- Orders after the sale: why an order was cancelled, the stock
-- changes committed here and not yet applied to Redis, and restocks by
-- their idempotency key.
--
-- The contract's OrderStatus has no TIMED_OUT: an order cancelled by its
-- owner and one cancelled after PAY_TIMEOUT are both status 4, and
-- cancel_reason ('cancel' or 'timeout', as in the ledger) tells them apart.
ALTER TABLE tb_voucher_order ADD COLUMN cancel_reason TEXT;

--bun:split
-- A stock change the database committed (a cancelled order's unit and
-- user slot, or a restock) that Redis has not applied yet. It is written
-- in the transaction of the change and deleted once the idempotent Redis
-- script applied it, so a crash in between leaves the row for the sweeper
-- (persistence.Orders.ApplyPending). load_stamp is the Redis load the
-- change belongs to: a reload after the commit counted it from here
-- already, and the script then skips it.
CREATE TABLE IF NOT EXISTS tb_stock_pending (
    kind        TEXT NOT NULL CHECK (kind IN ('return', 'restock')),
    ref_id      BIGINT NOT NULL,
    voucher_id  BIGINT NOT NULL REFERENCES tb_voucher (id),
    user_id     BIGINT,
    delta       INT NOT NULL CHECK (delta >= 1),
    initial     INT NOT NULL,
    load_stamp  TEXT NOT NULL,
    create_time TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (kind, ref_id)
);

--bun:split
CREATE INDEX IF NOT EXISTS ix_stock_pending_voucher ON tb_stock_pending (voucher_id);

--bun:split
CREATE INDEX IF NOT EXISTS ix_stock_pending_time ON tb_stock_pending (create_time);

--bun:split
-- Restocks (addStock), once per (voucher, key): a retried request with the
-- same key finds its row and changes nothing again.
CREATE TABLE IF NOT EXISTS tb_restock (
    id          BIGINT PRIMARY KEY,
    voucher_id  BIGINT NOT NULL REFERENCES tb_voucher (id),
    request_key TEXT NOT NULL,
    amount      INT NOT NULL CHECK (amount >= 1),
    create_time TIMESTAMPTZ NOT NULL,
    UNIQUE (voucher_id, request_key)
);
