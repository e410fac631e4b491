UPDATE commands
   SET status = 'running', in_doubt = true, lease_owner = NULL,
       lease_expires_at = NULL, next_attempt_at = NULL, updated_at = now()
 WHERE id = $1 AND attempt_id = $2 AND status = 'executing'
RETURNING updated_at
