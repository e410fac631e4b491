DELETE FROM commands WHERE id = ANY(ARRAY(
    SELECT id FROM commands
     WHERE finished_at < now() - make_interval(secs => $2::double precision)
     LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING application_id AS "application_id: ApplicationId",
          namespace_id AS "namespace_id: NamespaceId", command, subject, request_key
