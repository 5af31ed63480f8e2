-- The node slots of the order-id allocator (persistence/orderids.go): an
-- allocator leases one slot and, before it uses a second of ids, records
-- it in reserved_until_sec; the next owner of the slot starts after it.
-- lease_until_ms is unix milliseconds by the owner's clock (an integer
-- compares alike in Postgres and SQLite). Node 0 is left out: it is the
-- space of the ids the earlier Redis allocator handed out.
CREATE TABLE IF NOT EXISTS tb_order_id_node (
    node               INT PRIMARY KEY CHECK (node BETWEEN 1 AND 1023),
    owner              TEXT NOT NULL DEFAULT '',
    reserved_until_sec BIGINT NOT NULL DEFAULT 0 CHECK (reserved_until_sec >= 0),
    lease_until_ms     BIGINT NOT NULL DEFAULT 0
);
--bun:split
-- All slots up front, so that leasing is one compare-and-swap update.
-- ("WHERE true" lets SQLite parse the upsert clause after a SELECT.)
WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1023)
INSERT INTO tb_order_id_node (node)
SELECT i FROM n WHERE true
ON CONFLICT (node) DO NOTHING;
