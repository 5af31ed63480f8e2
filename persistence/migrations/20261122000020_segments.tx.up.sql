-- Segments: a seckill voucher's grabs spread over 1..64 segments, each an
-- actor identity of its own (hash(user) mod segments picks one). The same
-- statement runs on Postgres and on the embedded mode's SQLite.
ALTER TABLE tb_seckill_voucher ADD COLUMN segments INT NOT NULL DEFAULT 1 CHECK (segments BETWEEN 1 AND 64);
