UPDATE commands c
   SET lease_expires_at = now() + make_interval(secs => $3::double precision / 1000)
  FROM unnest($1::uuid[], $2::uuid[]) AS a(id, attempt_id)
 WHERE c.id = a.id AND c.attempt_id = a.attempt_id
   AND c.status IN ('executing', 'retry_wait')
RETURNING c.attempt_id AS "attempt_id!"
