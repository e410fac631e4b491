//! The declaration as `sluice apply` reads it: TOML written by the checker itself, never through
//! Sluice's own types.

use std::fmt::Write as _;

use super::{Declaration, Handler};

impl Declaration {
    /// The declaration as `sluice apply` reads it; `backend` is the webhook backend's base URL.
    pub fn to_toml(&self, backend: &str) -> String {
        let mut out = String::from("[namespace]\nmax_waiting = 100000\n");
        for c in &self.commands {
            let mut params = vec![
                "n = { type = \"string\", max_length = 24 }".to_string(),
                format!(
                    "res = {{ type = \"string\", max_length = 16, enum = {} }}",
                    list(&c.resources)
                ),
            ];
            if !c.regions.is_empty() {
                params.push(format!(
                    "region = {{ type = \"string\", max_length = 16, enum = {} }}",
                    list(&c.regions)
                ));
            }
            if !c.accounts.is_empty() {
                params.push(format!(
                    "account = {{ type = \"string\", max_length = 16, enum = {} }}",
                    list(&c.accounts)
                ));
            }
            let _ = writeln!(out, "\n[[command]]\ncode = \"{}\"", c.code);
            let _ = writeln!(out, "parameters = {{ {} }}", params.join(", "));
            out.push_str("resource_key = { from = \"input\", field = \"res\" }\n");
            let _ = writeln!(out, "deadline_seconds = {}", c.deadline_seconds);
            let i = &c.intake;
            let _ = writeln!(
                out,
                "intake = {{ per_second = {}, burst = {}, max_in_flight = {} }}",
                i.per_second, i.burst, i.max_in_flight
            );
            let a = &c.admission;
            let per_resource = a
                .per_resource
                .map(|n| format!(", max_in_flight_per_resource = {n}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "admission = {{ per_second = {}, burst = {}, max_in_flight = {}, max_queue = {}, \
                 max_wait_seconds = {}{per_resource} }}",
                a.per_second, a.burst, a.max_in_flight, a.max_queue, a.max_wait_seconds
            );
            match &c.handler {
                Handler::Webhook { timeout_ms } => {
                    let _ = writeln!(
                        out,
                        "handler = {{ kind = \"webhook\", url = \"{backend}/hook\", timeout_ms = {timeout_ms} }}"
                    );
                }
                Handler::Quota { pool } => {
                    let mode = match self.pool(pool).and_then(|p| p.reservation_seconds) {
                        Some(s) => format!("mode = \"reserved\", reservation_seconds = {s}"),
                        None => "mode = \"committed\"".to_string(),
                    };
                    let _ = writeln!(
                        out,
                        "handler = {{ kind = \"quota\", pool = \"{pool}\", {mode} }}"
                    );
                }
            }
            if !c.limits.is_empty() {
                let limits: Vec<String> = c
                    .limits
                    .iter()
                    .map(|l| {
                        let mut fields = vec![format!("key = \"{}\"", l.key)];
                        if let Some(n) = l.max_in_flight {
                            fields.push(format!("max_in_flight = {n}"));
                        }
                        if let Some(n) = l.per_second {
                            fields.push(format!("per_second = {n}"));
                        }
                        if let Some(n) = l.burst {
                            fields.push(format!("burst = {n}"));
                        }
                        format!("{{ {} }}", fields.join(", "))
                    })
                    .collect();
                let _ = writeln!(out, "limits = [ {} ]", limits.join(", "));
            }
        }
        for p in &self.pools {
            let _ = writeln!(
                out,
                "\n[[quota_pool]]\ncode = \"{}\"\ncapacity = {}",
                p.code, p.capacity
            );
        }
        for r in &self.rooms {
            let _ = writeln!(
                out,
                "\n[[room]]\ncode = \"{}\"\nmax_active = {}\npass_seconds = {}",
                r.code, r.max_active, r.pass_seconds
            );
            if let Some(n) = r.admit_per_minute {
                let _ = writeln!(out, "admit_per_minute = {n}");
            }
            if let Some(n) = r.heartbeat_seconds {
                let _ = writeln!(out, "heartbeat_seconds = {n}");
            }
        }
        out
    }
}

fn list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    format!("[{}]", quoted.join(", "))
}
