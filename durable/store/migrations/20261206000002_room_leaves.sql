-- A leave is one statement on its place's row, so leaving never waits for the admission
-- ticker's hold on the room's row: the room's counters take the leave at the ticker's next
-- step (`leave_counted`), and gateways answering polls from memory learn of leaves from the
-- queue by `ended_at` (durable/src/rooms/board.rs).
ALTER TABLE room_places ADD COLUMN leave_counted boolean NOT NULL DEFAULT true;

CREATE INDEX room_places_uncounted_leaves ON room_places (namespace_id, room)
    WHERE NOT leave_counted;
CREATE INDEX room_places_left_waiting ON room_places (namespace_id, room, ended_at)
    WHERE state = 'left' AND admitted_at IS NULL;
