-- no-transaction
-- The rebuild's first read, an application's highest queue sequence over its whole history
-- (durable/src/projection/rebuild.rs), in one probe of this index instead of a scan of every row
-- the application ever had (a parallel sequential scan at a million rows, found by the generic
-- plan check in gateway/tests/api/query_plans.rs). CONCURRENTLY, so adding it to a live table
-- blocks no insert; hence outside a transaction.
CREATE INDEX CONCURRENTLY IF NOT EXISTS commands_application_seq ON commands (application_id, queue_seq);
