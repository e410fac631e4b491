UPDATE commands
   SET status = 'executing', attempts = attempts + 1, in_doubt = true,
       next_attempt_at = NULL, error_code = NULL, error_message = NULL,
       updated_at = now()
 WHERE id = $1 AND attempt_id = $2 AND status = 'retry_wait'
RETURNING attempts
