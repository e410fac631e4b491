-- Proof of work at a room's door. A join that showed a solved challenge records the
-- challenge's random id: one solved challenge buys one place, once, even if its holder leaves
-- and comes back within the challenge's lifetime.
ALTER TABLE room_places ADD COLUMN challenge_id uuid;
CREATE UNIQUE INDEX room_places_challenge ON room_places (challenge_id)
    WHERE challenge_id IS NOT NULL;
