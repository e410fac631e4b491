-- Ed25519 keys that sign waiting-room passes. Every gateway signs with the one live key; a
-- rotated-out key stays published in /.well-known/jwks.json until every pass it signed has
-- expired, so an origin verifying a pass always finds its key.
CREATE TABLE pass_keys (
    kid         text PRIMARY KEY,
    seed        bytea NOT NULL CHECK (length(seed) = 32),
    public_key  bytea NOT NULL CHECK (length(public_key) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);

-- At most one live key.
CREATE UNIQUE INDEX pass_keys_one_live ON pass_keys ((true)) WHERE retired_at IS NULL;
