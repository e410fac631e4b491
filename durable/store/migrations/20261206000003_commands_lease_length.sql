-- The length of the lease the holder of an attempt renews (its executor's `lease_ms`), recorded
-- at the claim. A rebuild of the Redis projection restores a held command's permits for at least
-- that long from the rebuild: the holder's requests go out only while its last renewal in Redis
-- is younger than a lease, and PostgreSQL's `lease_expires_at` may be older than that renewal
-- (PostgreSQL out of reach while Redis renewed), so restoring permits that end at
-- `lease_expires_at` could hand them to another command while the holder still acts.
-- Rows claimed before this column existed read the executors' default lease (30 s).
ALTER TABLE commands ADD COLUMN lease_ms integer;
