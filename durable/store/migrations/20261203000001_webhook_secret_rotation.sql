-- A webhook secret rotation keeps the replaced secret live until it is retired: every request
-- is signed with both meanwhile (one v1 each), so a backend can move from one to the other
-- without refusing a request.
ALTER TABLE namespaces ADD COLUMN webhook_secret_previous text;
