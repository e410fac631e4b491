SELECT c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
       c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject, c.request_key,
       c.content_sha256, c.resource_key, c.queue_seq, c.status AS "status: CommandStatus",
       c.accepted_at, c.deadline_at, c.updated_at, c.limit_keys, p.generation
  FROM commands c JOIN projections p ON p.application_id = c.application_id
 WHERE c.application_id = $1 AND c.status IN ('accepted', 'retry_wait')
   AND c.lease_owner IS NULL AND c.queue_seq > $2
   AND c.updated_at < now() - make_interval(secs => $4)
 ORDER BY c.queue_seq LIMIT $3
