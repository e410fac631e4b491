SELECT id AS "id: CommandId", application_id AS "application_id: ApplicationId",
       namespace_id AS "namespace_id: NamespaceId", command, subject, request_key, content_sha256,
       resource_key, queue_seq, status AS "status: CommandStatus", accepted_at, deadline_at,
       updated_at, finished_at, attempts, cancel_requested, result, error_code, error_message
  FROM commands
 WHERE namespace_id = $1 AND command = $2 AND subject = $3
   AND ($4::uuid IS NULL OR id < $4)
   AND ($5::text IS NULL OR resource_key = $5)
 ORDER BY id DESC
 LIMIT $6
