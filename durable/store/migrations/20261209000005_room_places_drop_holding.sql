-- no-transaction
-- Replaced by room_places_admitted and room_places_given_back.
DROP INDEX CONCURRENTLY IF EXISTS room_places_holding;
