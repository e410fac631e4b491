SELECT id AS "id: CommandId", application_id AS "application_id: ApplicationId",
       namespace_id AS "namespace_id: NamespaceId", command, subject, request_key, content_sha256,
       resource_key, queue_seq, status AS "status: CommandStatus", accepted_at, deadline_at,
       updated_at, finished_at, attempts, cancel_requested, result, error_code, error_message
  FROM commands WHERE id = $1 AND namespace_id = $2
