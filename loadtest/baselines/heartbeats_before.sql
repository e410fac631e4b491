-- The heartbeats' statement and the index as they were before heartbeats were updates in place
-- (loadtest/heartbeats.sh runs them as its baseline): the rows locked first (`FOR UPDATE`, a
-- second write per row) and `pass_until` a key of an index, so every heartbeat wrote a new
-- version of the row and an entry in each of the table's indexes. A copy, meant to stay as it
-- was; the current statement is read from .sqlx/.
CREATE INDEX room_places_active_before ON room_places (namespace_id, room, pass_until)
    WHERE state = 'admitted';

CREATE FUNCTION beats_before(uuid[], uuid[], text[]) RETURNS SETOF uuid LANGUAGE sql AS $$
WITH asked AS (
        SELECT DISTINCT a.id, a.namespace_id, a.subject
          FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS a (id, namespace_id, subject)),
      locked AS (
        SELECT p.id, p.namespace_id, p.room, p.subject, p.state, p.admitted_at,
               p.pass_until
          FROM room_places p
         WHERE p.id = ANY($1)
         ORDER BY p.id
           FOR UPDATE OF p),
      extended AS (
        SELECT l.id,
               least(date_trunc('second', l.admitted_at)
                         + make_interval(secs => r.pass_seconds),
                     date_trunc('second', now())
                         + make_interval(secs => r.heartbeat_seconds)) AS until
          FROM locked l
          JOIN asked a ON a.id = l.id AND a.namespace_id = l.namespace_id
                      AND a.subject = l.subject
          JOIN rooms r ON r.namespace_id = l.namespace_id AND r.code = l.room
         WHERE l.state = 'admitted' AND l.pass_until > now()
           AND r.heartbeat_seconds IS NOT NULL)
 UPDATE room_places p
    SET renewed_at = date_trunc('second', now()), pass_until = e.until
   FROM extended e
  WHERE p.id = ANY($1) AND p.id = e.id AND e.until > p.pass_until
RETURNING p.id
$$;
