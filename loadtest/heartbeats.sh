#!/usr/bin/env bash
# What a heartbeat costs PostgreSQL: the heartbeats' statement as the gateway runs it (read from
# .sqlx/) against the statement and index it replaced (loadtest/baselines/heartbeats_before.sql),
# in alternating rounds on one database: 300,000 places of one room, 200,000 admitted, batches of
# 128 heartbeats of consecutive admitted places (a room whose heartbeat is an hour long; so many
# places that each is beaten again only after its pass's second has passed, so that every
# heartbeat moves its pass). pgbench drives both with the same clients; the figure is
# heartbeats a second, now over before, and how many of the row versions PostgreSQL wrote in
# place (heap-only, no index entry).
#
#   loadtest/heartbeats.sh [seconds per round, default 10] [rounds, default 3]
#
# Uses SLUICE_BENCH_DATABASE_URL (default the local PostgreSQL) for a database of its own,
# dropped at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. deploy/lib.sh
require_postgres

seconds=${1:-10}
rounds=${2:-3}
server="${SLUICE_BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
database="sluice_heartbeats_$$"
url="${server%/*}/$database"
pgbench=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -n 1)
pgbench=${pgbench:-pgbench}
work=$(mktemp -d)
export PGOPTIONS="-c client_min_messages=warning"
cleanup() {
  rm -rf "$work"
  psql "$server" -q -c "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psql "$server" -q -c "CREATE DATABASE $database" >/dev/null
apply_migrations "$url"

# The statement the gateway runs, from the checked queries, as a function of its parameters.
statement=$(for file in .sqlx/*.json; do
    query=$(jq -r '.query' "$file")
    case "$query" in *"WITH asked AS"*"pass_until = least"*) printf '%s\n' "$query" ;; esac
  done)
[ -n "$statement" ] || { echo "the heartbeats' statement is not in .sqlx/" >&2; exit 1; }

psql "$url" -v ON_ERROR_STOP=1 -q >/dev/null <<SQL
-- The namespace and its application are not needed: foreign keys are not checked while the
-- places are written.
SET session_replication_role = replica;
INSERT INTO rooms (namespace_id, code, max_active, pass_seconds, heartbeat_seconds, seed)
VALUES ('00000000-0000-0000-0000-000000000001', 'r', 200000, 86400, 3600,
        decode(repeat('ab', 32), 'hex'));
INSERT INTO room_places (id, namespace_id, room, subject, seq, prequeue, ord, state, joined_at,
                         admitted_at, renewed_at, pass_until, ended_at, challenge_id, join_key)
SELECT gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'r', 'person-' || g, g, true,
       g, CASE WHEN g <= 200000 THEN 'admitted' WHEN g <= 250000 THEN 'expired' ELSE 'waiting' END,
       now(), CASE WHEN g <= 250000 THEN now() END,
       CASE WHEN g <= 250000 THEN date_trunc('second', now()) END,
       CASE WHEN g <= 200000 THEN now() + interval '1 minute' WHEN g <= 250000 THEN now() END,
       CASE WHEN g > 200000 AND g <= 250000 THEN now() END,
       gen_random_uuid(), 'join-' || gen_random_uuid()
  FROM generate_series(1, 300000) g ORDER BY random();
CREATE TABLE admitted (n bigint PRIMARY KEY, id uuid, namespace_id uuid, subject text);
INSERT INTO admitted
SELECT row_number() OVER (ORDER BY id), id, namespace_id, subject
  FROM room_places WHERE state = 'admitted';
CREATE FUNCTION beats_now(uuid[], uuid[], text[]) RETURNS SETOF uuid LANGUAGE sql AS \$\$
$statement
\$\$;
SQL
psql "$url" -v ON_ERROR_STOP=1 -q -c "VACUUM ANALYZE" >/dev/null

for side in now before; do
  cat > "$work/$side.sql" <<SQL
\set start random(1, 199873)
SELECT count(*) FROM beats_$side(
    (SELECT array_agg(id) FROM admitted WHERE n BETWEEN :start AND :start + 127),
    (SELECT array_agg(namespace_id) FROM admitted WHERE n BETWEEN :start AND :start + 127),
    (SELECT array_agg(subject) FROM admitted WHERE n BETWEEN :start AND :start + 127));
SQL
done

counts() {
  psql "$url" -Atq -c "SELECT n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables
                        WHERE relname = 'room_places'"
}

# A backend's statistics reach pg_stat_user_tables when it exits: wait until pgbench's have.
quiet() {
  for _ in $(seq 1 100); do
    [ "$(psql "$url" -Atq -c "SELECT count(*) FROM pg_stat_activity
                               WHERE datname = current_database() AND pid <> pg_backend_pid()")" = 0 ] && return 0
    sleep 0.1
  done
  echo "pgbench's connections did not close" >&2
  return 1
}

# One round of one side: heartbeats a second (batches of 128), rows updated a second and the
# share of them updated in place.
round() {
  local side=$1 before after tps
  before=$(counts)
  tps=$("$pgbench" -n -f "$work/$side.sql" -c 2 -j 2 -T "$seconds" "$url" 2>/dev/null \
          | awk '/^tps/ { print $3 }')
  quiet
  after=$(counts)
  echo "$tps $before $after"
}

report() {
  local r=$1 side=$2 tps=$3 b_upd=$4 b_hot=$5 a_upd=$6 a_hot=$7
  printf 'round %d  %-7s %7.0f heartbeats/s, %7.0f rows updated/s, %3.0f %% in place\n' "$r" "$side" \
    "$(echo "$tps * 128" | bc -l)" "$(echo "($a_upd - $b_upd) / $seconds" | bc -l)" \
    "$(echo "100 * ($a_hot - $b_hot) / ($a_upd - $b_upd + 0.0001)" | bc -l)"
}

log "baseline: the statement and index before (loadtest/baselines/heartbeats_before.sql)"
declare -a now_rates before_rates now_updates before_updates
for r in $(seq 1 "$rounds"); do
  psql "$url" -v ON_ERROR_STOP=1 -q -c "DROP INDEX IF EXISTS room_places_active_before" \
    -c "DROP FUNCTION IF EXISTS beats_before" >/dev/null
  read -r tps b_upd b_hot a_upd a_hot < <(round now)
  now_rates+=("$tps")
  now_updates+=("$(echo "($a_upd - $b_upd) / $seconds" | bc -l)")
  report "$r" now: "$tps" "$b_upd" "$b_hot" "$a_upd" "$a_hot"
  psql "$url" -v ON_ERROR_STOP=1 -q -f loadtest/baselines/heartbeats_before.sql >/dev/null
  read -r tps b_upd b_hot a_upd a_hot < <(round before)
  before_rates+=("$tps")
  before_updates+=("$(echo "($a_upd - $b_upd) / $seconds" | bc -l)")
  report "$r" before: "$tps" "$b_upd" "$b_hot" "$a_upd" "$a_hot"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
now_median=$(median "${now_rates[@]}")
before_median=$(median "${before_rates[@]}")
printf 'heartbeats/s, median of %d rounds: now %.0f, before %.0f: %.2fx\n' "$rounds" \
  "$(echo "$now_median * 128" | bc -l)" "$(echo "$before_median * 128" | bc -l)" \
  "$(echo "$now_median / $before_median" | bc -l)"
now_median=$(median "${now_updates[@]}")
before_median=$(median "${before_updates[@]}")
printf 'passes moved (rows updated)/s, median of %d rounds: now %.0f, before %.0f: %.2fx\n' \
  "$rounds" "$now_median" "$before_median" "$(echo "$now_median / $before_median" | bc -l)"
