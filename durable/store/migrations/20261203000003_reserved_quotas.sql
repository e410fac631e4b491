-- Reserved quota units (handler mode "reserved"): a unit held until its holder confirms or
-- releases it, or the database's clock passes `expires_at`.

-- The expiry sweeper finds overdue reservations without reading decided allocations.
CREATE INDEX allocations_reserved_expiry ON allocations (expires_at) WHERE state = 'reserved';

-- A reservation always says when it lapses; a decided allocation keeps the time it had.
ALTER TABLE allocations
    ADD CONSTRAINT allocations_reserved_expires CHECK (state <> 'reserved' OR expires_at IS NOT NULL);

-- Idempotency receipts of `POST /v1/quota-pools/{pool}:configure`, like the application's
-- (application_resource_receipts): keys are scoped to the calling namespace, whose pools they
-- change; the snapshot is the answer as first given.
CREATE TABLE quota_pool_receipts (
    namespace_id     uuid NOT NULL REFERENCES namespaces (id),
    idempotency_key  text NOT NULL,
    request_sha256   bytea NOT NULL,
    snapshot         jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, idempotency_key)
);
