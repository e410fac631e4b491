WITH candidate AS (
    SELECT i.*
      FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                  $7::bytea[], $8::jsonb[], $9::text[], $10::bigint[], $11::int[], $12::int[],
                  $13::jsonb[], $14::bigint[], $15::text[])
           AS i(id, application_id, namespace_id, command, subject, request_key,
                content_sha256, input, resource_key, queue_seq, deadline_seconds,
                max_wait_seconds, limit_keys, generation, trace_parent)
     WHERE NOT EXISTS (
           SELECT 1 FROM controls c
            WHERE c.namespace_id = i.namespace_id AND c.paused
              AND c.command IN ('', i.command))
       AND i.generation = (SELECT p.generation FROM projections p
                            WHERE p.application_id = i.application_id)),
claimed AS (
    INSERT INTO request_keys (namespace_id, command, subject, request_key, command_id,
                              application_id)
    SELECT namespace_id, command, subject, request_key, id, application_id FROM candidate
    ON CONFLICT (namespace_id, command, subject, request_key) DO NOTHING
    RETURNING command_id)
INSERT INTO commands (id, application_id, namespace_id, command, subject, request_key,
                      content_sha256, input, resource_key, queue_seq, status,
                      accepted_at, deadline_at, max_wait_at, updated_at, limit_keys,
                      trace_parent)
SELECT i.id, i.application_id, i.namespace_id, i.command, i.subject, i.request_key,
       i.content_sha256, i.input, i.resource_key, i.queue_seq, 'accepted',
       now(), now() + make_interval(secs => i.deadline_seconds),
       now() + make_interval(secs => i.max_wait_seconds), now(), i.limit_keys,
       i.trace_parent
  FROM candidate i JOIN claimed k ON k.command_id = i.id
RETURNING id AS "id: CommandId", accepted_at, deadline_at
