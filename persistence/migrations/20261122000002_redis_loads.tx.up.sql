-- Which load of a voucher's stock the stock Redis holds now (a random
-- "life" stamp written by each preheat that found no stock in Redis), so
-- that the order writer can tell an order sold before Redis lost its data
-- and was reloaded from the database (the reload could not count it) from
-- one sold after. A table rather than a column: CREATE ... IF NOT EXISTS
-- is idempotent in both dialects, ALTER TABLE ADD COLUMN is not in SQLite.
CREATE TABLE IF NOT EXISTS tb_voucher_redis_load (
    voucher_id BIGINT PRIMARY KEY REFERENCES tb_voucher (id),
    life       TEXT NOT NULL,
    load_time  TIMESTAMPTZ NOT NULL
);
