-- A paired machine's Planner hold (`store::HoldStore`, AO-21): the hold names the machine and no
-- browser login, so a restart keeps the hold (its sessions, questions, runs) for the machine's
-- backend to take over with its credential, though not the owner. Additive: one nullable column.

ALTER TABLE planner_link_holds ADD COLUMN machine_id UUID;
