-- Settled red packets by the time of their refund, the earliest first,
-- for the pruning of those past RED_PACKET_RETENTION
-- (RedPacketStore.PruneSettled). Written once for Postgres and SQLite.
CREATE INDEX IF NOT EXISTS ix_red_packet_refunded ON tb_red_packet (refund_time) WHERE refund_time IS NOT NULL;
