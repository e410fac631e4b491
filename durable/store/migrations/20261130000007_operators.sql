-- Operators: pause controls with audit, and the status board.

-- The status board counts unfinished commands per command and status and finds the oldest of
-- each: an index-only range per namespace, never a scan of finished rows.
CREATE INDEX commands_status_board ON commands (namespace_id, command, status, accepted_at)
    WHERE status IN ('accepted', 'executing', 'running', 'retry_wait', 'needs_review');

-- Work in hand (executing, running, between two attempts) is bounded by the concurrency budgets;
-- the status board reads its limit keys from here without touching the waiting backlog.
CREATE INDEX commands_in_hand ON commands (namespace_id)
    WHERE status IN ('executing', 'running', 'retry_wait');
