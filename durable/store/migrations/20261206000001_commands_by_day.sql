-- `commands` partitioned by acceptance day, so that retention drops a whole day's table instead
-- of deleting its rows one by one (durable/src/lifecycle/retention.rs).
--
-- The partition key is the id: ids are UUID v7, whose first 48 bits are the gateway's clock in
-- milliseconds, and PostgreSQL orders uuids bytewise, so a day is a range of ids and a lookup
-- by id reads one partition. The idempotency of request keys cannot stay a unique constraint of
-- `commands` (a partitioned table's unique constraints must contain its partition key, and two
-- enqueues of one key may come days apart): it moves to `request_keys`, one row per key held,
-- written in the same statement as the command (durable/queries/insert_batch.sql).
--
-- There is no default partition: `ALTER TABLE … DETACH PARTITION … CONCURRENTLY`, which lets
-- retention remove a day without an ACCESS EXCLUSIVE lock on `commands` (a pause of every
-- intake), is refused on a table that has one. Days are created ahead instead (today − 1 to
-- today + 3 here, then by every executor round and, should an acceptance find its day missing,
-- by the group commit itself).

-- The first UUID v7 of a UTC day: its timestamp in milliseconds, then zeros.
CREATE FUNCTION sluice_day_floor(day date) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (lpad(to_hex((extract(epoch FROM day::timestamp) * 1000)::bigint), 12, '0')
                  || '00000000000000000000')::uuid $$;

-- The UTC day a UUID v7 was made on (what its first 48 bits say).
CREATE FUNCTION sluice_day_of(id uuid) RETURNS date
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (to_timestamp((('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint)
                               / 1000.0) AT TIME ZONE 'UTC')::date $$;

-- Creates the partitions `commands_dYYYYMMDD` of the days from `first` to `last` that do not
-- exist yet; answers how many it created. Safe to run concurrently: a day another session
-- created meanwhile is skipped.
CREATE FUNCTION sluice_ensure_command_days(first date, last date) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    day date;
    name text;
    created integer := 0;
BEGIN
    FOR day IN SELECT d::date FROM generate_series(first, last, interval '1 day') AS d LOOP
        name := 'commands_d' || to_char(day, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(quote_ident(name)) IS NOT NULL;
        BEGIN
            -- Made alone, then attached: `CREATE TABLE … PARTITION OF` would take an ACCESS
            -- EXCLUSIVE lock on `commands`, ATTACH only SHARE UPDATE EXCLUSIVE (intake goes on).
            EXECUTE format('CREATE TABLE %I (LIKE commands INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           name);
            EXECUTE format('ALTER TABLE commands ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           name, sluice_day_floor(day), sluice_day_floor(day + 1));
            created := created + 1;
        EXCEPTION WHEN duplicate_table THEN
            NULL;
        END;
    END LOOP;
    RETURN created;
END
$$;

ALTER TABLE commands RENAME TO commands_before_days;

CREATE TABLE commands (LIKE commands_before_days INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);

-- Every day that holds a row, and the days around today.
SELECT sluice_ensure_command_days(day, day)
  FROM (SELECT DISTINCT sluice_day_of(id) AS day FROM commands_before_days) AS held;
SELECT sluice_ensure_command_days(utc_today - 1, utc_today + 3)
  FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS utc_today) AS today;

INSERT INTO commands SELECT * FROM commands_before_days;

CREATE TABLE request_keys (
    namespace_id   uuid NOT NULL,
    command        text NOT NULL,
    subject        text NOT NULL,
    request_key    text NOT NULL,
    command_id     uuid NOT NULL,
    -- The application whose Redis projection caches the key (forgotten there too).
    application_id uuid NOT NULL,
    PRIMARY KEY (namespace_id, command, subject, request_key)
);
-- Retention forgets a day's keys by their commands' id range before it drops the day.
CREATE INDEX request_keys_command ON request_keys (command_id);

INSERT INTO request_keys (namespace_id, command, subject, request_key, command_id, application_id)
SELECT namespace_id, command, subject, request_key, id, application_id FROM commands_before_days;

DROP TABLE commands_before_days;

-- The indexes of before, on every partition (built after the copy, as a bulk load should), less
-- the request keys' unique constraint.
--
-- The foreign keys to `applications` and `namespaces` are not made again: dropping a day that
-- has them drops their triggers on those two tables, under an ACCESS EXCLUSIVE lock of each,
-- which stops every acceptance (and deadlocks with one that already checked a key) for as long
-- as the drop waits. Applications and namespaces are never deleted, and every command's ids
-- come from a credential the gateway has just read, so the keys guarded against nothing that
-- can happen.
ALTER TABLE commands ADD PRIMARY KEY (id);
CREATE INDEX commands_subject_newest ON commands (namespace_id, command, subject, id DESC);
CREATE INDEX commands_unfinished ON commands (application_id, status, queue_seq)
    WHERE status IN ('accepted', 'executing', 'running', 'retry_wait', 'needs_review');
CREATE INDEX commands_finished_at ON commands (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX commands_lease_expiry ON commands (lease_expires_at) WHERE status = 'executing';
CREATE INDEX commands_waiting_deadline ON commands (max_wait_at)
    WHERE status IN ('accepted', 'retry_wait');
CREATE INDEX commands_held_lease_expiry ON commands (lease_expires_at)
    WHERE lease_owner IS NOT NULL;
CREATE INDEX commands_running_deadline ON commands (deadline_at) WHERE status = 'running';
CREATE INDEX commands_status_board ON commands (namespace_id, command, status, accepted_at)
    WHERE status IN ('accepted', 'executing', 'running', 'retry_wait', 'needs_review');
CREATE INDEX commands_in_hand ON commands (namespace_id)
    WHERE status IN ('executing', 'running', 'retry_wait');
CREATE INDEX commands_application_seq ON commands (application_id, queue_seq);
