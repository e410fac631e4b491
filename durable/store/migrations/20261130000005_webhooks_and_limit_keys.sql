-- Webhook commands and keyed limits.
--
-- `limit_keys`: the command's limit keys rendered from its input at acceptance, as
-- `[[template, key], …]`; fixed like the deadline, so a rebuild restores the very permits the
-- command held. The numbers of each limit come from the current declaration (by template).
-- `in_doubt`: some attempt may have reached the backend without a decisive answer (a timeout, a
-- connection lost after sending, an executor killed mid-request). At the deadline such a command
-- ends `needs_review`, never `expired`: its outcome is unknown.
ALTER TABLE commands
    ADD COLUMN limit_keys jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN in_doubt boolean NOT NULL DEFAULT false;

-- Rows an executor holds (executing, or retry_wait between two attempts): the lease sweeper
-- finds the ones whose executor died.
CREATE INDEX commands_held_lease_expiry ON commands (lease_expires_at) WHERE lease_owner IS NOT NULL;
-- Running commands (a webhook answered 202) whose deadline passed without `:complete`.
CREATE INDEX commands_running_deadline ON commands (deadline_at) WHERE status = 'running';
