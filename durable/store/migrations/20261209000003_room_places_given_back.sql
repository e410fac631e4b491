-- no-transaction
-- Passes given back that an origin may still accept hold their slot of `max_active` until
-- `holds_until` plus the grace: one range of this.
CREATE INDEX CONCURRENTLY IF NOT EXISTS room_places_given_back
    ON room_places (namespace_id, room, holds_until) WHERE holds_until IS NOT NULL;
