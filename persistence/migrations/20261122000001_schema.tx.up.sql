-- The contract tables (shared/contract/db.md) plus our own columns and
-- indexes. Written once for Postgres and SQLite: every statement here is
-- valid in both.
CREATE TABLE IF NOT EXISTS tb_voucher (
    id           BIGINT PRIMARY KEY,
    shop_id      BIGINT NOT NULL,
    title        TEXT NOT NULL,
    sub_title    TEXT,
    rules        TEXT,
    pay_value    BIGINT NOT NULL CHECK (pay_value >= 0),
    actual_value BIGINT NOT NULL CHECK (actual_value >= 0),
    type         SMALLINT NOT NULL CHECK (type IN (0, 1)),
    status       SMALLINT NOT NULL CHECK (status IN (1, 2, 3)),
    create_time  TIMESTAMPTZ NOT NULL,
    update_time  TIMESTAMPTZ NOT NULL
);
--bun:split
CREATE INDEX IF NOT EXISTS ix_voucher_shop ON tb_voucher (shop_id, id);
--bun:split
CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
    voucher_id     BIGINT PRIMARY KEY REFERENCES tb_voucher (id),
    initial_stock  INT NOT NULL CHECK (initial_stock >= 1),
    stock          INT NOT NULL CHECK (stock >= 0),
    per_user_limit INT NOT NULL CHECK (per_user_limit >= 1),
    begin_time     TIMESTAMPTZ NOT NULL,
    end_time       TIMESTAMPTZ NOT NULL,
    CHECK (stock <= initial_stock),
    CHECK (begin_time < end_time)
);
--bun:split
-- slot is 1 for every order of a perUserLimit = 1 voucher and NULL otherwise,
-- so the partial unique index below is the last guard of "one live order per
-- person" (NULLs never collide).
CREATE TABLE IF NOT EXISTS tb_voucher_order (
    id          BIGINT PRIMARY KEY,
    user_id     BIGINT NOT NULL,
    voucher_id  BIGINT NOT NULL REFERENCES tb_voucher (id),
    status      SMALLINT NOT NULL CHECK (status BETWEEN 1 AND 6),
    slot        INT,
    create_time TIMESTAMPTZ NOT NULL,
    pay_time    TIMESTAMPTZ,
    cancel_time TIMESTAMPTZ,
    update_time TIMESTAMPTZ NOT NULL
);
--bun:split
CREATE UNIQUE INDEX IF NOT EXISTS ux_voucher_order_live_slot
    ON tb_voucher_order (voucher_id, user_id, slot) WHERE status NOT IN (4, 6);
--bun:split
CREATE INDEX IF NOT EXISTS ix_voucher_order_user ON tb_voucher_order (user_id, id);
--bun:split
CREATE INDEX IF NOT EXISTS ix_voucher_order_voucher ON tb_voucher_order (voucher_id, status);
--bun:split
CREATE INDEX IF NOT EXISTS ix_voucher_order_unpaid ON tb_voucher_order (create_time) WHERE status = 1;
--bun:split
CREATE TABLE IF NOT EXISTS tb_red_packet (
    id          BIGINT PRIMARY KEY,
    creator_id  BIGINT NOT NULL,
    total_cents BIGINT NOT NULL CHECK (total_cents >= 1),
    count       INT NOT NULL CHECK (count >= 1),
    expire_time TIMESTAMPTZ NOT NULL,
    create_time TIMESTAMPTZ NOT NULL,
    CHECK (total_cents >= count)
);
--bun:split
CREATE TABLE IF NOT EXISTS tb_red_packet_grab (
    red_packet_id BIGINT NOT NULL REFERENCES tb_red_packet (id),
    seq           INT NOT NULL,
    user_id       BIGINT NOT NULL,
    amount_cents  BIGINT NOT NULL CHECK (amount_cents >= 1),
    grab_time     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (red_packet_id, seq),
    UNIQUE (red_packet_id, user_id)
);
--bun:split
-- Every change of a seckill voucher's stock. (reason, ref_id) is unique so a
-- retried batch writes each order's ledger row once.
CREATE TABLE IF NOT EXISTS tb_stock_ledger (
    voucher_id  BIGINT NOT NULL REFERENCES tb_voucher (id),
    delta       INT NOT NULL,
    reason      TEXT NOT NULL CHECK (reason IN ('preheat', 'sale', 'cancel', 'timeout', 'restock', 'reconcile')),
    ref_id      BIGINT,
    create_time TIMESTAMPTZ NOT NULL
);
--bun:split
CREATE UNIQUE INDEX IF NOT EXISTS ux_stock_ledger_ref ON tb_stock_ledger (voucher_id, reason, ref_id);
--bun:split
CREATE INDEX IF NOT EXISTS ix_stock_ledger_voucher ON tb_stock_ledger (voucher_id, create_time);
