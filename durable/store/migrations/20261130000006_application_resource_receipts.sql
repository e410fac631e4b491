-- Idempotency receipts of `POST /v1/application/resources:configure`. Keys are scoped to the
-- calling namespace (two namespaces of one application never share a key space, so one cannot
-- replay another's management call); the snapshot is the answer as first given, usage included.
CREATE TABLE application_resource_receipts (
    namespace_id     uuid NOT NULL REFERENCES namespaces (id),
    idempotency_key  text NOT NULL,
    request_sha256   bytea NOT NULL,
    snapshot         jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, idempotency_key)
);
