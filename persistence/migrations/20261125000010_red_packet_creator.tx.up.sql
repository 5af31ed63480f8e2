-- A creator's red packets by creation time: the daily bound of
-- createRedPacket counts the creator's red packets of the last 24 hours
-- (RedPacketStore.CreateWithin) with one range scan of at most the bound's
-- rows. Written once for Postgres and SQLite.
CREATE INDEX IF NOT EXISTS ix_red_packet_creator ON tb_red_packet (creator_id, create_time);
