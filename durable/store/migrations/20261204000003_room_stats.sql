-- The rooms on the status board: people admitted in the last minute, counted by a range of this
-- index (a room's admissions of the last 60 s) rather than a visit to every place the room
-- ever admitted. Partial: waiting places, which are most of a busy room, are not in it.
CREATE INDEX room_places_admitted_at ON room_places (namespace_id, room, admitted_at)
    WHERE admitted_at IS NOT NULL;
