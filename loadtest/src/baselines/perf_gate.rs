//! Switches a `perf record` of this process on only while Sluice's side of a pair is measured,
//! so that a profile (`loadtest/profile.sh`) shows what Sluice's answers cost and not the
//! baselines run in the same process between its rounds. `perf record -D -1 --control
//! fifo:PATH` starts disabled and reads `enable` / `disable` from the FIFO.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use crate::bench_stack::BoxError;

/// No FIFO: every call does nothing.
#[derive(Default)]
pub(super) struct PerfGate {
    fifo: Option<Mutex<File>>,
}

impl PerfGate {
    /// Opens the FIFO for writing (blocks until perf has it open for reading, which it does
    /// before it starts the command it records).
    pub(super) fn open(path: Option<&Path>) -> Result<Self, BoxError> {
        let fifo = match path {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| format!("the perf control FIFO {}: {e}", path.display()))?,
            )),
            None => None,
        };
        Ok(Self { fifo })
    }

    /// Sampling on: a Sluice round starts.
    pub(super) fn enable(&self) {
        self.send(b"enable\n");
    }

    /// Sampling off: the Sluice round ended.
    pub(super) fn disable(&self) {
        self.send(b"disable\n");
    }

    fn send(&self, command: &[u8]) {
        if let Some(fifo) = &self.fifo {
            // A profile that misses a switch is still a profile; the benchmark goes on.
            if let Ok(mut file) = fifo.lock()
                && let Err(error) = file.write_all(command)
            {
                eprintln!("perf control: {error}");
            }
        }
    }
}
