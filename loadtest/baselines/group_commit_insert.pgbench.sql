-- One group-commit transaction as durable/src/lifecycle/group_commit.rs commits it, for pgbench
-- (run by sluice-bench-baselines with -n -M prepared -f this file).
--   1. the control locks of the batch namespaces, shared (control.rs, lock_namespaces_shared)
--   2. the request keys claimed (ON CONFLICT DO NOTHING) and the commands of the claimed keys
--      inserted, with the pause re-check, in one statement (durable/queries/insert_batch.sql)
--   3. the NOTIFY that wakes executors
-- The rows come from generate_series instead of unnest of bound arrays (their ids UUID v7-like,
-- of the current millisecond, so they land in today's day of `commands`); everything else is
-- the same statement into the real tables with their constraints and indexes.
-- Variables (pgbench -D NAME=VALUE): control_lock (the lock key text), app, ns, command, offer,
-- batch (rows per transaction), deadline and max_wait (seconds).
BEGIN;
SELECT pg_advisory_xact_lock_shared(hashtextextended(:control_lock::text, 0));
WITH candidate AS (
    SELECT i.*
      FROM (SELECT (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
                    || '7' || substr(md5(random()::text || g::text), 1, 19))::uuid AS id,
                   :app::uuid AS application_id, :ns::uuid AS namespace_id,
                   :command::text AS command, 'pgbench-' || g::text AS subject,
                   gen_random_uuid()::text AS request_key,
                   sha256(convert_to(g::text, 'UTF8')) AS content_sha256,
                   jsonb_build_object('offer', :offer::text) AS input,
                   :offer::text AS resource_key, g::bigint AS queue_seq,
                   :deadline::int AS deadline_seconds, :max_wait::int AS max_wait_seconds,
                   '[]'::jsonb AS limit_keys
              FROM generate_series(1, :batch::int) AS g) AS i
     WHERE NOT EXISTS (
           SELECT 1 FROM controls c
            WHERE c.namespace_id = i.namespace_id AND c.paused
              AND c.command IN ('', i.command))),
claimed AS (
    INSERT INTO request_keys (namespace_id, command, subject, request_key, command_id,
                              application_id)
    SELECT namespace_id, command, subject, request_key, id, application_id FROM candidate
    ON CONFLICT (namespace_id, command, subject, request_key) DO NOTHING
    RETURNING command_id)
INSERT INTO commands (id, application_id, namespace_id, command, subject, request_key,
                      content_sha256, input, resource_key, queue_seq, status,
                      accepted_at, deadline_at, max_wait_at, updated_at, limit_keys)
SELECT i.id, i.application_id, i.namespace_id, i.command, i.subject, i.request_key,
       i.content_sha256, i.input, i.resource_key, i.queue_seq, 'accepted',
       now(), now() + make_interval(secs => i.deadline_seconds),
       now() + make_interval(secs => i.max_wait_seconds), now(), i.limit_keys
  FROM candidate i JOIN claimed k ON k.command_id = i.id
RETURNING id, accepted_at, deadline_at;
SELECT pg_notify('sluice_outbox', :app::text);
END;
