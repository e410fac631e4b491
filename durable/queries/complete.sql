UPDATE commands
   SET status = $2, result = $3, error_code = $4, error_message = $5,
       finished_at = now(), lease_owner = NULL, lease_expires_at = NULL,
       next_attempt_at = NULL, attempt_id = NULL, updated_at = now()
 WHERE id = $1
RETURNING id AS "id: CommandId", application_id AS "application_id: ApplicationId",
          namespace_id AS "namespace_id: NamespaceId", command, subject, request_key, content_sha256,
          resource_key, queue_seq, status AS "status: CommandStatus", accepted_at, deadline_at,
          updated_at, finished_at, attempts, cancel_requested, result, error_code, error_message
