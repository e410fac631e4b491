-- no-transaction
-- One live place per subject and room, with the subject first. A join batch looks up its
-- subjects' live places (`subject = ANY(…)`, durable/src/rooms/join.rs); with the room's columns
-- first (`room_places_live_subject`, dropped by the next migration), a plan made while the room
-- was still empty (a drop's room fills in seconds, long before anything analyzes it, and the
-- connection keeps the plan) scanned the room's every live place for each batch and filtered on
-- the subject: 18.8 ms a batch at 20,000 places, growing with the room. With the subject first,
-- any plan that uses the index probes it by subject. CONCURRENTLY, so a live table's joins are
-- not blocked; hence outside a transaction, one statement per file.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS room_places_live_by_subject
    ON room_places (subject, namespace_id, room) WHERE state IN ('waiting', 'admitted');
