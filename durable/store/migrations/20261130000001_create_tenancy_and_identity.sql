-- Tenancy and identity: applications own namespaces; namespaces own credentials, subject keys,
-- declarations and controls. Secrets are stored only as SHA-256 hashes (they are 256-bit random
-- values, so a slow KDF would add latency without adding safety).

CREATE TABLE applications (
    id               uuid PRIMARY KEY,
    name             text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    max_unfinished   bigint NOT NULL DEFAULT 1000000 CHECK (max_unfinished BETWEEN 1 AND 100000000),
    max_concurrency  bigint NOT NULL DEFAULT 10000 CHECK (max_concurrency BETWEEN 1 AND 1000000),
    rate_per_second  bigint NOT NULL DEFAULT 100000 CHECK (rate_per_second BETWEEN 1 AND 10000000),
    resources_revision bigint NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE namespaces (
    id              uuid PRIMARY KEY,
    application_id  uuid NOT NULL REFERENCES applications (id),
    name            text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_-]{0,63}$'),
    webhook_secret  text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (application_id, name)
);

CREATE TABLE credentials (
    id            uuid PRIMARY KEY,
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    secret_sha256 bytea NOT NULL UNIQUE,
    scopes        text[] NOT NULL,
    label         text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

-- HS256 keys with which a namespace's backend signs browser subject tokens. `kid` is globally
-- unique so that a token's header alone selects its namespace.
CREATE TABLE subject_keys (
    kid           text PRIMARY KEY,
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    secret        bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);
CREATE INDEX subject_keys_namespace ON subject_keys (namespace_id);

CREATE TABLE audit (
    id              bigserial PRIMARY KEY,
    application_id  uuid NOT NULL REFERENCES applications (id),
    namespace_id    uuid REFERENCES namespaces (id),
    actor           text NOT NULL,
    action          text NOT NULL,
    details         jsonb NOT NULL DEFAULT '{}'::jsonb,
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_application_at ON audit (application_id, at DESC);
