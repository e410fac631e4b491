//! `sluice`: parse, set up logging, run. Everything else lives in the library.

use clap::Parser;
use sluice_gateway::cli::{Cli, run};

/// jemalloc instead of glibc's allocator, for the gateway and the executor alike (one binary):
/// - speed per request: glibc's allocator cost 5–7 µs of a refusal's 62 µs (measured with
///   jemalloc through `LD_PRELOAD`, which cut it to 42 µs); jemalloc's thread caches and size classes
///   serve the many small allocations of a request without locks;
/// - memory back after a spike: glibc kept the memory of 10,000 closed connections (a heap only
///   shrinks from its top), jemalloc returns freed pages to the kernel ([`MALLOC_CONF`]).
///
/// The library and its tests keep the system allocator: only what runs in production needs it
/// (feature `jemalloc`, on by default; the suite's build leaves it out, gateway/Cargo.toml says
/// why).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts (before `main`). `background_thread`: a jemalloc
/// thread returns freed pages on time even while the process is idle (otherwise that only happens
/// inside later allocations); `dirty_decay_ms:1000`: freed pages are returned within about a
/// second of the last use (the default is 10 s); `muzzy_decay_ms:0`: returned at once with
/// `MADV_DONTNEED`, so the resident memory drops, rather than `MADV_FREE`, whose pages stay
/// counted as resident until the kernel runs short. Still overridden at run time by
/// `_RJEM_MALLOC_CONF` (the crate builds jemalloc with the `_rjem_` prefix, so it serves Rust's
/// allocations only and this is the prefixed name of jemalloc's `malloc_conf`).
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // exporting a symbol jemalloc looks up: a C string, NUL-terminated below
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; JEMALLOC_OPTIONS.len()] = JEMALLOC_OPTIONS;
#[cfg(feature = "jemalloc")]
const JEMALLOC_OPTIONS: &[u8; 60] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";
#[cfg(feature = "jemalloc")]
const _: () = assert!(JEMALLOC_OPTIONS[JEMALLOC_OPTIONS.len() - 1] == 0);

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let telemetry = match sluice_gateway::logging::init(cli.log_format, cli.command.service()) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("sluice: {error}");
            std::process::exit(2);
        }
    };
    let outcome = run(cli).await;
    // The last spans are flushed before the process ends, on success and failure alike.
    drop(telemetry);
    if let Err(error) = outcome {
        eprintln!("sluice: {error}");
        std::process::exit(1);
    }
}
