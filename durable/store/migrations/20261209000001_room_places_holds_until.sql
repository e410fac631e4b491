-- Heartbeats without index writes. A heartbeat moves only `renewed_at` and `pass_until`; while
-- `pass_until` was a key of two indexes (`room_places_active`, `room_places_holding`), every
-- heartbeat wrote a new entry into each of the table's indexes (PostgreSQL updates in place, a
-- heap-only tuple, only when no indexed column changes). At 20,000 admitted people with a 5 s
-- heartbeat (12,000 a second) that was most of PostgreSQL's time. The next migrations index
-- admitted places without `pass_until` and given-back places by this column, which copies
-- `pass_until` only once a place is left, so heartbeats of admitted places never change it.
-- Generated, so every writer keeps it right. Adding it rewrites the table once.
ALTER TABLE room_places
    ADD COLUMN holds_until timestamptz
        GENERATED ALWAYS AS (CASE WHEN state = 'left' THEN pass_until END) STORED;

-- Room on each page for a heartbeat's new version beside the old one (an update in place
-- needs it); pages written from now on.
ALTER TABLE room_places SET (fillfactor = 70);
