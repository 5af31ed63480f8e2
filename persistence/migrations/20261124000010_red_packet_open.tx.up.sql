-- The red packets each creator has open, for the per-user quota of
-- createRedPacket (RedPacketStore.CreateWithin). A row is written with
-- its red packet and removed once the red packet is closed: refunded
-- (RedPacketStore.Refund removes it in the refund's transaction), or found
-- fully grabbed in tb_red_packet_grab by a later create of the same
-- creator. So a create's quota check reads at most the creator's open red
-- packets and the few closed since their last create, not every red packet
-- they ever made nor every one not refunded yet.
-- Written once for Postgres and SQLite.
CREATE TABLE IF NOT EXISTS tb_red_packet_open (
    red_packet_id BIGINT PRIMARY KEY REFERENCES tb_red_packet (id),
    creator_id    BIGINT NOT NULL
);

--bun:split
CREATE INDEX IF NOT EXISTS ix_red_packet_open_creator ON tb_red_packet_open (creator_id);

--bun:split
-- Red packets made before the quota: every one not refunded yet is open
-- until a create of its creator finds it fully grabbed.
INSERT INTO tb_red_packet_open (red_packet_id, creator_id)
SELECT id, creator_id FROM tb_red_packet WHERE refund_time IS NULL
ON CONFLICT (red_packet_id) DO NOTHING;
