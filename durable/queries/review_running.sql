WITH due AS (
    SELECT id FROM commands
     WHERE status = 'running' AND deadline_at <= now()
     ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE commands c SET
    status = 'needs_review', error_code = 'OUTCOME_UNKNOWN',
    error_message = 'the backend accepted the command (202) and reported no result by the deadline',
    attempt_id = NULL, updated_at = now()
  FROM due WHERE c.id = due.id
RETURNING c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
          c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject, c.request_key,
          c.content_sha256, c.resource_key, c.queue_seq, c.status AS "status: CommandStatus",
          c.accepted_at, c.deadline_at, c.updated_at, c.result, c.error_code, c.error_message,
          c.lease_owner IS NOT NULL AS "held!", c.attempt_id AS "attempt: AttemptId"
