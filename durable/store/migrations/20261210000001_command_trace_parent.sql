-- The W3C traceparent a command was enqueued under: the gateway's request span when tracing is
-- on, else the caller's own traceparent; NULL when the request carried none. The executor's
-- attempts continue that trace and its webhooks send it on. Nullable without a default, so
-- adding it rewrites no partition.
ALTER TABLE commands ADD COLUMN trace_parent text;
