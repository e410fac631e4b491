//! The page's header: what was run, where, for how long, and the verdict.

use super::format::{count, decimal, seconds, text_or};
use crate::report::{Machine, Report};

/// Scenario, machine and the verdict, so a reader knows at a glance what was run where and
/// whether it may be trusted.
pub(super) fn header(report: &Report) -> String {
    let (class, verdict) = if report.invariants_hold {
        ("ok", "invariants hold")
    } else {
        ("bad", "INVARIANT VIOLATED")
    };
    let holding = report.invariants.iter().filter(|c| c.holds).count();
    let met = report.targets.iter().filter(|t| t.met).count();
    let summary = format!(
        "{holding} of {} checks hold · {met} of {} targets met",
        report.invariants.len(),
        report.targets.len()
    );
    format!(
        "<header class=\"top\">\n<div>\n<p class=\"kicker\">Sluice load run · capacity review</p>\n\
         <h1>{scenario}</h1>\n<p class=\"when\">started {started} · ran {duration}</p>\n</div>\n\
         <div class=\"verdict {class}\"><strong>{verdict}</strong><span>{summary}</span></div>\n\
         {machine}</header>\n",
        scenario = text_or(&report.scenario, "unnamed scenario"),
        started = text_or(&report.started_at, "at an unknown time"),
        duration = seconds(report.duration_seconds),
        machine = machine(&report.stack, &report.machine),
    )
}

/// What ran on which machine, so runs on different hardware are not compared as if alike.
fn machine(stack: &str, machine: &Machine) -> String {
    let facts = [
        ("Stack", text_or(stack, "—")),
        ("Host", text_or(&machine.hostname, "—")),
        (
            "CPU",
            format!(
                "{} × {}",
                count(machine.cpus as u64),
                text_or(&machine.cpu_model, "—")
            ),
        ),
        (
            "Memory",
            format!("{}\u{a0}GiB", decimal(machine.memory_gib, 1)),
        ),
        ("Kernel", text_or(&machine.kernel, "—")),
        (
            "Load average",
            format!("{} (1 min, at start)", decimal(machine.load_average, 2)),
        ),
    ];
    let items: String = facts
        .iter()
        .map(|(name, value)| format!("<div><dt>{name}</dt><dd>{value}</dd></div>\n"))
        .collect();
    format!("<dl class=\"facts\">\n{items}</dl>\n")
}
