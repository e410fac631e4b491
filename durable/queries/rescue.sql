WITH decided AS (
    SELECT c.id, c.attempt_id AS lapsed,
           CASE WHEN c.deadline_at > now() THEN 'retry_wait'
                WHEN c.in_doubt THEN 'needs_review'
                ELSE 'expired' END AS status
      FROM commands c
     WHERE c.id = ANY($1) AND c.lease_owner IS NOT NULL
       AND c.lease_expires_at < now() AND c.status IN ('executing', 'retry_wait'))
UPDATE commands c SET
    status = d.status,
    finished_at = CASE WHEN d.status = 'expired' THEN now() END,
    error_code = CASE d.status WHEN 'expired' THEN 'DEADLINE_EXCEEDED'
                               WHEN 'needs_review' THEN 'OUTCOME_UNKNOWN'
                               ELSE c.error_code END,
    error_message = CASE d.status
        WHEN 'expired' THEN 'the deadline passed before the command could finish'
        WHEN 'needs_review' THEN 'the executor stopped mid-request and the deadline passed: the backend may have acted'
        ELSE c.error_message END,
    lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
    attempt_id = NULL, updated_at = now()
  FROM decided d WHERE c.id = d.id
RETURNING c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
          c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject, c.request_key,
          c.content_sha256, c.resource_key, c.queue_seq, c.status AS "status: CommandStatus",
          c.accepted_at, c.deadline_at, c.updated_at, c.result, c.error_code, c.error_message,
          false AS "held!", d.lapsed AS "attempt: AttemptId"
