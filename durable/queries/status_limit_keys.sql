SELECT k.value->>1 AS "key!", count(*) AS "holders!"
  FROM commands c, jsonb_array_elements(c.limit_keys) AS k
 WHERE c.namespace_id = $1 AND c.status IN ('executing', 'running', 'retry_wait')
 GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $2
