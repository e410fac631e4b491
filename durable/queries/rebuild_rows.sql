SELECT id AS "id: CommandId", application_id AS "application_id: ApplicationId",
       namespace_id AS "namespace_id: NamespaceId", command, subject, request_key, content_sha256,
       resource_key, queue_seq, status AS "status: CommandStatus", accepted_at, deadline_at,
       updated_at, limit_keys, attempt_id, lease_owner IS NOT NULL AS "held!",
       -- A held row's permits outlive its holder's last renewal in Redis, which PostgreSQL's
       -- lease may not have seen (migrations/20261206000003_commands_lease_length.sql); read
       -- after the projection was cleared, so no renewal of the old one extends past it.
       CASE WHEN lease_owner IS NOT NULL
            THEN greatest(lease_expires_at,
                          clock_timestamp()
                              + make_interval(secs => coalesce(lease_ms, 30000)::double precision / 1000))
            ELSE coalesce(lease_expires_at,
                          deadline_at + make_interval(secs => $5::double precision))
       END AS "permit_expires_at!"
  FROM commands
 WHERE application_id = $1
   AND status IN ('accepted', 'executing', 'running', 'retry_wait', 'needs_review')
   AND (queue_seq, id) > ($2, $4)
 ORDER BY queue_seq, id
 LIMIT $3
