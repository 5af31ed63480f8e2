-- Each running order writer's lease, and the last time it held no entry
-- read from Redis (WriterLeases): a reload of a voucher Redis lost holds
-- its sales only until every writer with a live lease has been clean
-- since the reload began, instead of for a fixed time (catalog.Holds).
-- A writer refreshes its row every step and deletes it when it stops;
-- a killed one's row counts until expires_at. Times are the database's
-- clock. Used on Postgres; written once for Postgres and SQLite.
CREATE TABLE IF NOT EXISTS tb_writer_lease (
    family     TEXT NOT NULL,
    consumer   TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    clean_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (family, consumer)
);
