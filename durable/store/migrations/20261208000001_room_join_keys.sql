-- The `Idempotency-Key` a join was sent with, if any. A person whose join's answer was lost
-- (a dropped connection in the rush) sends the join again with the same key; it is answered the
-- place that key made, as it is now, even once that place has ended, instead of a second place.
ALTER TABLE room_places ADD COLUMN join_key text;
