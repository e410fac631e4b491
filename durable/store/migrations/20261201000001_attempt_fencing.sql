-- Attempt fencing (the life cycle as one fenced state machine).
--
-- `attempt_id`: the attempt that holds the row. admit.lua mints it with the command's permits,
-- the claim records it, and every later write of that attempt (renewal, retry, running, landing,
-- giving it back) is conditioned on it. A lease that lapsed and was claimed again — by another
-- executor or by the same one — gets a new attempt, so the first attempt's answer can never land
-- beside the second's. Cleared when the attempt gives the row back or is rescued; kept on
-- `running` rows (the attempt whose backend answered 202) so a rebuild restores their permits
-- under the same attempt.
ALTER TABLE commands ADD COLUMN attempt_id uuid;
