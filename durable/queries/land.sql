UPDATE commands
   SET status = $3, result = $4, error_code = $5, error_message = $6,
       finished_at = CASE WHEN $3 = 'needs_review' THEN NULL ELSE now() END,
       lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
       attempt_id = NULL, updated_at = now()
 WHERE id = $1 AND attempt_id = $2 AND status IN ('executing', 'retry_wait')
RETURNING updated_at
