-- Declarations are revisioned: every apply inserts a new row; the newest revision is in force.
CREATE TABLE declarations (
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    revision      bigint NOT NULL CHECK (revision >= 1),
    document      jsonb NOT NULL,
    source        text NOT NULL,
    applied_by    text NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, revision)
);

CREATE TABLE quota_pools (
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    code          text NOT NULL,
    capacity      bigint NOT NULL CHECK (capacity >= 0),
    allocated     bigint NOT NULL DEFAULT 0 CHECK (allocated >= 0),
    reserved      bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    revision      bigint NOT NULL DEFAULT 1,
    PRIMARY KEY (namespace_id, code),
    CHECK (allocated + reserved <= capacity)
);

-- Pause controls. command = '' is the whole namespace. Acceptance re-checks this table inside its
-- INSERT, so a pause holds even when Redis lost its copy of the flag.
CREATE TABLE controls (
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    command       text NOT NULL DEFAULT '',
    paused        boolean NOT NULL,
    reason        text NOT NULL DEFAULT '',
    revision      bigint NOT NULL DEFAULT 1,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, command)
);

-- The generation of each application's Redis projection. A projection in Redis older than this
-- (or missing) is not trusted: scripts answer NOT_READY until a rebuild stores generation + 1.
CREATE TABLE projections (
    application_id  uuid PRIMARY KEY REFERENCES applications (id),
    generation      bigint NOT NULL DEFAULT 0,
    rebuilt_at      timestamptz
);
