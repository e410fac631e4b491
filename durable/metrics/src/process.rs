//! The process's own figures under the names every Prometheus client library exports
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`, …), read
//! from `/proc/self` when scraped, and `sluice_build_info`: what dashboards and alerts written
//! for any service already chart (a leak of memory or descriptors, CPU saturation, which
//! version runs where). Off Linux, or when `/proc` cannot be read, the process figures are
//! left out rather than made up.

use std::fmt::Write as _;

/// `sluice_build_info{version}` and the process figures, in Prometheus text.
pub fn text() -> String {
    let mut text = String::new();
    // `sample`: what follows the name on its line (labels, if any, and the value).
    let mut family = |name: &str, kind: &str, help: &str, sample: &str| {
        let _ = writeln!(
            text,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{sample}"
        );
    };
    family(
        "sluice_build_info",
        "gauge",
        "Always 1; its labels say which build of Sluice this process runs",
        &format!("{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
    );
    if let Some(figures) = read() {
        family(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            &format!(" {}", figures.cpu_seconds),
        );
        family(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            &format!(" {}", figures.resident_bytes),
        );
        family(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            &format!(" {}", figures.virtual_bytes),
        );
        family(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            &format!(" {}", figures.open_fds),
        );
        if let Some(max) = figures.max_fds {
            family(
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                &format!(" {max}"),
            );
        }
        family(
            "process_threads",
            "gauge",
            "Number of OS threads in the process.",
            &format!(" {}", figures.threads),
        );
        if let Some(start) = figures.start_time_seconds {
            family(
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                &format!(" {start}"),
            );
        }
    }
    text
}

/// What `/proc/self` says of this process.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub threads: u64,
    pub start_time_seconds: Option<f64>,
}

/// Clock ticks a second (`sysconf(_SC_CLK_TCK)`) and the page size, as the kernel reports them.
fn units() -> (f64, u64) {
    // SAFETY: sysconf reads a constant of the running system; it has no preconditions.
    #[allow(unsafe_code)]
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (
        if ticks > 0 { ticks as f64 } else { 100.0 },
        if page > 0 { page as u64 } else { 4096 },
    )
}

/// Reads `/proc/self/stat`, `/proc/self/fd`, `/proc/self/limits` and `/proc/stat`'s boot time.
pub fn read() -> Option<Figures> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (ticks, page) = units();
    let fields = stat_fields(&stat)?;
    // Fields after the command name, numbered as proc(5) numbers them from 3 (`state`).
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    let cpu_seconds = (field(14)? + field(15)?) as f64 / ticks;
    let threads = field(20)?;
    let started_ticks = field(22)?;
    let virtual_bytes = field(23)?;
    let resident_bytes = field(24)? * page;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| max_open_files(&limits));
    let start_time_seconds = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("btime ")?.trim().parse::<u64>().ok())
        })
        .map(|boot| boot as f64 + started_ticks as f64 / ticks);
    Some(Figures {
        cpu_seconds,
        resident_bytes,
        virtual_bytes,
        open_fds,
        max_fds,
        threads,
        start_time_seconds,
    })
}

/// The fields of `/proc/self/stat` after `pid (comm)`: the command name may hold spaces and
/// parentheses, so the split starts after its last `)`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "42 (tokio (rt) w) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 7 0 1234 1000000 200";
        let fields = stat_fields(stat).expect("fields");
        assert_eq!(fields[0], "S", "field 3, the state");
        assert_eq!(fields[14 - 3], "250", "field 14, utime");
        assert_eq!(fields[20 - 3], "7", "field 20, threads");
        assert_eq!(fields[24 - 3], "200", "field 24, rss");
    }

    #[test]
    fn the_soft_limit_of_open_files_is_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
    }

    #[test]
    fn this_process_reads_as_itself() {
        let figures = read().expect("/proc/self on Linux");
        assert!(figures.resident_bytes > 0 && figures.virtual_bytes >= figures.resident_bytes);
        assert!(figures.open_fds >= 3, "stdin, stdout, stderr at least");
        assert!(figures.threads >= 1);
        let text = text();
        assert!(text.contains("sluice_build_info{version=\""), "{text}");
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
    }
}
