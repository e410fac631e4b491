SELECT c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
       c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject, c.request_key,
       c.content_sha256, c.resource_key, c.queue_seq, c.status AS "status: CommandStatus",
       c.accepted_at, c.deadline_at, c.updated_at, c.finished_at, c.attempts,
       c.cancel_requested, c.result, c.error_code, c.error_message
  FROM request_keys k JOIN commands c ON c.id = k.command_id
 WHERE k.namespace_id = $1 AND k.command = $2 AND k.subject = $3 AND k.request_key = $4
