-- How many had joined the room (`next_seq`) when its pre-queue was drawn. A pre-queue comes back
-- at the start spread over a time that grows with its size (`Pace::start_spread`), and the
-- admissions made while it is coming back give first passes that outlast that spread; the
-- ticker reads the size here, as the gateways read it before the draw (`next_seq`).
ALTER TABLE rooms ADD COLUMN drawn_crowd bigint;
