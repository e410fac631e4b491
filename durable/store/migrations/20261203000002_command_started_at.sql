-- When a command first started: the instant admit.lua took its permits (its turn came), in
-- the projection's clock (Redis `TIME`, the clock its tickets' positions and ETAs are observed
-- on), recorded by the claim of that admission. A later attempt (a requeue after a lapsed lease,
-- a webhook retry) keeps the first start: an ETA promises when the wait ends, not when the last
-- attempt began. NULL while the command never started (waiting, or ended without starting).
--
-- It measures what the queue promised: the wait against the ETA a caller was told, and the
-- order of starts within a resource against the order of acceptance (`queue_seq`).
ALTER TABLE commands ADD COLUMN started_at timestamptz;
