SELECT command, status AS "status: CommandStatus", count(*) AS "count!",
       min(accepted_at) AS "oldest!"
  FROM commands
 WHERE namespace_id = $1
   AND status IN ('accepted', 'executing', 'running', 'retry_wait', 'needs_review')
 GROUP BY command, status
 ORDER BY command, status
