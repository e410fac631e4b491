UPDATE commands
   SET status = 'retry_wait', lease_owner = NULL, lease_expires_at = NULL,
       next_attempt_at = NULL, attempt_id = NULL, updated_at = now()
 WHERE id = $1 AND attempt_id = $2 AND status IN ('executing', 'retry_wait')
RETURNING updated_at
