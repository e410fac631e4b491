//! The machine a run measured on, for the report: numbers from a 2-core laptop and a 64-core
//! server are not comparable, so every report says which it was.

use crate::report::Machine;

pub fn describe() -> Machine {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let meminfo = read("/proc/meminfo");
    let memory_kib: f64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        cpu_model: cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, model)| model.trim().to_string())
            .unwrap_or_default(),
        memory_gib: memory_kib / 1024.0 / 1024.0,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        load_average: read("/proc/loadavg")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
    }
}
