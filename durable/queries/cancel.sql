WITH old AS (
    SELECT id, status, (status = 'accepted' OR (status = 'retry_wait' AND NOT in_doubt))
               AS now_cancelled
      FROM commands WHERE id = $1 AND namespace_id = $2 FOR UPDATE)
UPDATE commands c SET
    status = CASE WHEN old.now_cancelled THEN 'cancelled' ELSE c.status END,
    finished_at = CASE WHEN old.now_cancelled THEN now() ELSE c.finished_at END,
    error_code = CASE WHEN old.now_cancelled THEN NULL ELSE c.error_code END,
    error_message = CASE WHEN old.now_cancelled THEN NULL ELSE c.error_message END,
    lease_owner = CASE WHEN old.now_cancelled THEN NULL ELSE c.lease_owner END,
    lease_expires_at = CASE WHEN old.now_cancelled THEN NULL ELSE c.lease_expires_at END,
    attempt_id = CASE WHEN old.now_cancelled THEN NULL ELSE c.attempt_id END,
    cancel_requested = c.cancel_requested
        OR old.status IN ('executing', 'running', 'retry_wait') AND NOT old.now_cancelled,
    updated_at = CASE WHEN old.status IN ('accepted', 'retry_wait', 'executing', 'running')
                      THEN now() ELSE c.updated_at END
  FROM old
 WHERE c.id = old.id
RETURNING c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
          c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject, c.request_key,
          c.content_sha256, c.resource_key, c.queue_seq, c.status AS "status: CommandStatus",
          c.accepted_at, c.deadline_at, c.updated_at, c.finished_at, c.attempts,
          c.cancel_requested, c.result, c.error_code, c.error_message,
          old.now_cancelled AS "now_cancelled!"
