-- When an apply last loosened the room's admission (a larger or removed `max_active` or
-- `admit_per_minute`, a start brought forward, a shorter first pass). A waiting place is told
-- to come back no sooner than its turn could come under the limits it was told under, so for a
-- while after a loosening the admission step gives first passes long enough to be picked up by
-- someone told that before it (durable/src/rooms/admission.rs).
ALTER TABLE rooms ADD COLUMN loosened_at timestamptz;
