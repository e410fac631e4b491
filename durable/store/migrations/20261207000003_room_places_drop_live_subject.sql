-- no-transaction
-- Replaced by `room_places_live_by_subject` (the same uniqueness, the subject first).
DROP INDEX CONCURRENTLY IF EXISTS room_places_live_subject;
