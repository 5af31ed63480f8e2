-- Bots and scalpers: whether a seckill voucher's grabs need a
-- signed grab ticket, and which challenge a ticket request must solve
-- first (0 none, 1 proof of work; domain.ChallengeKind). Columns only:
-- nothing is renamed, and every voucher that existed stays open.
ALTER TABLE tb_seckill_voucher ADD COLUMN require_ticket BOOLEAN NOT NULL DEFAULT FALSE;

--bun:split
ALTER TABLE tb_seckill_voucher ADD COLUMN challenge SMALLINT NOT NULL DEFAULT 0;
