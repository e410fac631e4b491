-- no-transaction
-- Admitted places, without their `pass_until` (see the previous migration): the ticker's
-- lapsed passes, the live passes the status board and the metrics count, and the admitted part
-- of what holds a slot are each one range of this, at most `max_active` places of a room.
CREATE INDEX CONCURRENTLY IF NOT EXISTS room_places_admitted
    ON room_places (namespace_id, room) WHERE state = 'admitted';
