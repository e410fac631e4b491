-- no-transaction
-- One place per subject, room and join key, found by the subject first as a join batch looks
-- its subjects up (durable/src/rooms/join.rs). CONCURRENTLY, so a live table's joins are not
-- blocked; hence outside a transaction, one statement per file.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS room_places_by_join_key
    ON room_places (subject, namespace_id, room, join_key) WHERE join_key IS NOT NULL;
