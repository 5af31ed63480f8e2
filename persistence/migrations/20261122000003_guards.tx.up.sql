-- Postgres as the last guard of the per-user limit, for any limit: one row
-- per (voucher, user) counting the user's live orders, kept by the order
-- writer in the transaction that inserts the orders. The CHECK refuses an
-- order that would put a user over the voucher's limit, whatever Redis
-- said (the live-slot index of 000001 guards only perUserLimit = 1).
CREATE TABLE IF NOT EXISTS tb_voucher_user (
    voucher_id     BIGINT NOT NULL REFERENCES tb_voucher (id),
    user_id        BIGINT NOT NULL,
    live           INT NOT NULL CHECK (live >= 0),
    per_user_limit INT NOT NULL,
    PRIMARY KEY (voucher_id, user_id),
    CHECK (live <= per_user_limit)
);

--bun:split
INSERT INTO tb_voucher_user (voucher_id, user_id, live, per_user_limit)
SELECT o.voucher_id, o.user_id, COUNT(*), MAX(s.per_user_limit)
FROM tb_voucher_order o JOIN tb_seckill_voucher s ON s.voucher_id = o.voucher_id
WHERE o.status NOT IN (4, 6)
GROUP BY o.voucher_id, o.user_id;

--bun:split
-- The request id a grab was sold under: a client's retry with the same key
-- is answered from it even after Redis lost the voucher and reloaded it
-- from here, and no request can ever hold two orders.
ALTER TABLE tb_voucher_order ADD COLUMN request_id TEXT;

--bun:split
CREATE UNIQUE INDEX IF NOT EXISTS ux_voucher_order_request
    ON tb_voucher_order (voucher_id, request_id) WHERE request_id IS NOT NULL;

--bun:split
-- Orders the database refused for good (over the stock, over a user's
-- limit, an order id already used by another order, a request id already
-- used, sold from a Redis load that was lost, or a malformed log entry):
-- kept with the reason for an operator (admin query deadLetteredOrders),
-- counted by reconciliation and by flashsale_orders_dead_total{reason}.
-- Durable here rather than in Redis, which may lose them with its data.
-- key is "<order log>/<entry id>", so a replayed entry is recorded once;
-- load_stamp is the Redis load the order was sold from (reconciliation
-- counts the dead letters of the load Redis holds).
CREATE TABLE IF NOT EXISTS tb_order_dead_letter (
    key         TEXT PRIMARY KEY,
    order_id    BIGINT,
    user_id     BIGINT,
    voucher_id  BIGINT,
    request_id  TEXT,
    load_stamp  TEXT,
    reason      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    entry       TEXT NOT NULL,
    create_time TIMESTAMPTZ NOT NULL
);

--bun:split
CREATE INDEX IF NOT EXISTS ix_order_dead_letter_voucher ON tb_order_dead_letter (voucher_id, create_time);
