-- no-transaction
-- Replaced by room_places_admitted (pass_until no longer indexed).
DROP INDEX CONCURRENTLY IF EXISTS room_places_active;
