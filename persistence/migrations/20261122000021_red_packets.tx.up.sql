-- Red packets. tb_red_packet and tb_red_packet_grab are the
-- contract's (../shared/contract/db.md, created by the first migration);
-- the rest is ours.
--
-- refund_* record the expiry refund: the unclaimed
-- cents and packets handed back to the creator, and when. The refund job
-- sets them with one conditional UPDATE (WHERE refund_time IS NULL), so a
-- red packet is refunded exactly once whichever node runs the job.
ALTER TABLE tb_red_packet ADD COLUMN refund_cents BIGINT;

--bun:split
ALTER TABLE tb_red_packet ADD COLUMN refund_count INT;

--bun:split
ALTER TABLE tb_red_packet ADD COLUMN refund_time TIMESTAMPTZ;

--bun:split
CREATE INDEX IF NOT EXISTS ix_red_packet_unrefunded ON tb_red_packet (expire_time) WHERE refund_time IS NULL;

--bun:split
-- request_id traces a grabbed packet to the grab's request (a retry with
-- the same key answers the same packet).
ALTER TABLE tb_red_packet_grab ADD COLUMN request_id TEXT;

--bun:split
-- Every packet of a red packet, written with it before any is pushed into
-- Redis: what a red packet was split into never depends on Redis, and a
-- red packet Redis lost is loaded again from here.
CREATE TABLE IF NOT EXISTS tb_red_packet_part (
    red_packet_id BIGINT NOT NULL REFERENCES tb_red_packet (id),
    seq           INT NOT NULL,
    amount_cents  BIGINT NOT NULL CHECK (amount_cents >= 1),
    PRIMARY KEY (red_packet_id, seq)
);
