//! The Lua scripts run in a real Redis, with concurrent callers from several tasks: what each
//! decides, and the bounds `lua/README.md` states. They need no gateway and no PostgreSQL.

mod asked_keys;
mod late_writes;
mod lua_admit;
mod lua_admit_keys;
mod lua_epoch;
mod lua_fixture;
mod lua_intake_batch;
mod lua_limits;
mod lua_scripts;
mod lua_start_rate;
mod lua_waiting;
mod not_ready;
mod redis_client;
mod status_board;
mod strict_keys;
