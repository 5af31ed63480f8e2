-- A seckill voucher's waiting room: whether its grabs go through a line,
-- how many of the line it admits a second, how many admitted tickets may
-- be open at once, and whether it admits nobody for now
-- (domain.WaitingRoom). Columns only: every voucher that existed has no
-- room.
ALTER TABLE tb_seckill_voucher ADD COLUMN waiting_room BOOLEAN NOT NULL DEFAULT FALSE;

--bun:split
ALTER TABLE tb_seckill_voucher ADD COLUMN admit_per_second INT NOT NULL DEFAULT 0;

--bun:split
ALTER TABLE tb_seckill_voucher ADD COLUMN max_active INT NOT NULL DEFAULT 0;

--bun:split
ALTER TABLE tb_seckill_voucher ADD COLUMN room_paused BOOLEAN NOT NULL DEFAULT FALSE;
