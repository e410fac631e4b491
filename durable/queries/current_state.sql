SELECT c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
       c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject, c.request_key,
       c.content_sha256, c.resource_key, c.queue_seq, c.status AS "status: CommandStatus",
       c.accepted_at, c.deadline_at, c.updated_at, c.result, c.error_code, c.error_message,
       c.lease_owner IS NOT NULL AS "held!", c.attempt_id AS "attempt: AttemptId"
  FROM commands c WHERE c.id = ANY($1)
