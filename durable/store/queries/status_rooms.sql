SELECT r.code, r.declared, r.max_active, r.admit_per_minute, r.opens_at, r.drawn_at,
       r.waiting, r.admitted_total, r.left_total, r.lapsed_total,
       (SELECT count(*) FROM room_places p
         WHERE p.namespace_id = r.namespace_id AND p.room = r.code
           AND p.state = 'admitted' AND p.pass_until > now()) AS "active!",
       (SELECT count(*) FROM room_places p
         WHERE p.namespace_id = r.namespace_id AND p.room = r.code
           AND p.state = 'admitted' AND p.pass_until > now() - make_interval(secs => $3))
     + (SELECT count(*) FROM room_places p
         WHERE p.namespace_id = r.namespace_id AND p.room = r.code
           AND p.holds_until IS NOT NULL
           AND p.holds_until > now() - make_interval(secs => $3)) AS "holding!",
       (SELECT count(*) FROM room_places p
         WHERE p.namespace_id = r.namespace_id AND p.room = r.code
           AND p.admitted_at IS NOT NULL
           AND p.admitted_at > now() - make_interval(secs => $4)) AS "admitted_last_minute!"
  FROM rooms r
 WHERE r.namespace_id = $1
 ORDER BY r.declared DESC, r.code
 LIMIT $2
