-- Quota allocations: one per subject per pool, ever (a released allocation does not allow a
-- second one in the same pool), and at most one per command.
CREATE TABLE allocations (
    id            uuid PRIMARY KEY,
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    pool          text NOT NULL,
    subject       text NOT NULL,
    command_id    uuid NOT NULL UNIQUE,
    state         text NOT NULL CHECK (state IN ('reserved', 'confirmed', 'released', 'expired')),
    expires_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (namespace_id, pool, subject),
    FOREIGN KEY (namespace_id, pool) REFERENCES quota_pools (namespace_id, code)
);

-- Sweepers find expired leases and overdue waiting commands without scanning terminal rows.
CREATE INDEX commands_lease_expiry ON commands (lease_expires_at) WHERE status = 'executing';
CREATE INDEX commands_waiting_deadline ON commands (max_wait_at) WHERE status IN ('accepted', 'retry_wait');
