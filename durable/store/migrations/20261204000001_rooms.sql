-- Waiting rooms. PostgreSQL is the authority for every place: a pass is signed only for a
-- place whose admission (and every heartbeat that extended it) is committed here, so a lost
-- Redis can never let more passes live than `max_active`.
CREATE TABLE rooms (
    namespace_id      uuid NOT NULL REFERENCES namespaces (id) ON DELETE CASCADE,
    code              text NOT NULL,
    -- The declared settings, copied on every apply so the admission ticker reads one row.
    max_active        integer CHECK (max_active > 0),
    admit_per_minute  integer CHECK (admit_per_minute > 0),
    pass_seconds      integer NOT NULL CHECK (pass_seconds > 0),
    heartbeat_seconds integer CHECK (heartbeat_seconds > 0),
    opens_at          timestamptz,
    prequeue_seconds  integer CHECK (prequeue_seconds > 0),
    shuffle_prequeue  boolean NOT NULL DEFAULT true,
    -- False once a later declaration left the room out: it takes no more joins, and its
    -- places run their course.
    declared          boolean NOT NULL DEFAULT true,
    -- 32 random bytes drawn when the room is first declared and never changed: its SHA-256 is
    -- published before `opens_at`, the seed itself after, so anyone can recompute the
    -- pre-queue's order.
    seed              bytea NOT NULL CHECK (length(seed) = 32),
    -- When the pre-queue's order was drawn (at or after `opens_at`); null until then.
    drawn_at          timestamptz,
    -- Joins so far: each place's `seq`, handed out under this row's lock.
    next_seq          bigint NOT NULL DEFAULT 0,
    -- The highest queue order admitted; admission goes in order, so a waiting place's
    -- position is its order minus this, minus one (less any who left ahead of it).
    admitted_through  bigint NOT NULL DEFAULT 0,
    waiting           bigint NOT NULL DEFAULT 0 CHECK (waiting >= 0),
    -- Places in state 'admitted' (a pass given back may hold its slot a little longer: see
    -- the admission step).
    active            bigint NOT NULL DEFAULT 0 CHECK (active >= 0),
    -- The admission rate's bucket (admit_per_minute), refilled by the ticker.
    tokens            double precision NOT NULL DEFAULT 0,
    tokens_at         timestamptz NOT NULL DEFAULT now(),
    admitted_total    bigint NOT NULL DEFAULT 0,
    left_total        bigint NOT NULL DEFAULT 0,
    lapsed_total      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace_id, code)
);

CREATE TABLE room_places (
    id            uuid PRIMARY KEY,
    namespace_id  uuid NOT NULL,
    room          text NOT NULL,
    subject       text NOT NULL,
    -- Arrival order within the room (1, 2, …, no gaps).
    seq           bigint NOT NULL,
    -- Joined before `opens_at`: ordered by the draw.
    prequeue      boolean NOT NULL,
    -- Queue order: `seq` after the start; the drawn rank for the pre-queue (null until drawn).
    ord           bigint,
    state         text NOT NULL CHECK (state IN ('waiting', 'admitted', 'left', 'expired')),
    joined_at     timestamptz NOT NULL,
    admitted_at   timestamptz,
    -- When the live pass was last signed anew (admission or heartbeat) and when it ends: the
    -- pass's `iat` and `exp`, whole seconds.
    renewed_at    timestamptz,
    pass_until    timestamptz,
    ended_at      timestamptz,
    FOREIGN KEY (namespace_id, room) REFERENCES rooms (namespace_id, code) ON DELETE CASCADE,
    CHECK ((state = 'admitted') = (pass_until IS NOT NULL AND ended_at IS NULL))
);

-- One live place per subject and room.
CREATE UNIQUE INDEX room_places_live_subject ON room_places (namespace_id, room, subject)
    WHERE state IN ('waiting', 'admitted');
-- The next to admit.
CREATE INDEX room_places_waiting ON room_places (namespace_id, room, ord)
    WHERE state = 'waiting';
-- Passes that lapse next.
CREATE INDEX room_places_active ON room_places (namespace_id, room, pass_until)
    WHERE state = 'admitted';
-- Places that hold a slot of `max_active`: admitted, or given back while their last pass
-- could still be accepted by an origin (until `pass_until` plus the grace).
CREATE INDEX room_places_holding ON room_places (namespace_id, room, pass_until)
    WHERE state IN ('admitted', 'left');
-- The published pre-queue (ids only) and the draw.
CREATE INDEX room_places_prequeue ON room_places (namespace_id, room, id)
    WHERE prequeue;
