//! The admission configuration `admit.lua` reads: the `cfg` hash of an application, one entry per
//! command an executor can run and per declared limit template, written from the declarations
//! by every executor's catalog refresh.

use fred::prelude::*;

use super::AppKeys;
use crate::DurableError;
use crate::Projection;
use crate::declaration::CommandDecl;
use crate::ids::NamespaceId;

/// The admission spec of a command as `admit.lua` reads it from the `cfg` hash.
pub fn admission_spec(decl: &CommandDecl) -> String {
    format!(
        "{} {} {} {}",
        decl.admission.max_in_flight,
        decl.admission.per_second,
        decl.admission.burst,
        decl.admission.max_in_flight_per_resource.unwrap_or(0)
    )
}

/// The `cfg` entries of a command's limit templates: `(field, "max_in_flight per_second burst")`,
/// 0 meaning unlimited.
pub fn limit_specs(namespace_id: NamespaceId, decl: &CommandDecl) -> Vec<(String, String)> {
    decl.limits
        .iter()
        .map(|limit| {
            (
                AppKeys::limit_config_field(namespace_id, &limit.key),
                format!(
                    "{} {} {}",
                    limit.max_in_flight.unwrap_or(0),
                    limit.per_second.unwrap_or(0),
                    limit.burst.or(limit.per_second).unwrap_or(0)
                ),
            )
        })
        .collect()
}

/// Replaces the admission specs of an application: commands that no longer exist (or whose
/// handler this executor cannot run) lose their entry, so `admit.lua` leaves them waiting.
pub async fn write_admission_config(
    redis: &Projection,
    keys: &AppKeys,
    specs: Vec<(String, String)>,
) -> Result<(), DurableError> {
    let client = redis.pool().next();
    let current: Vec<String> = client.hkeys(keys.admission_config()).await?;
    let stale: Vec<String> = current
        .into_iter()
        .filter(|field| !specs.iter().any(|(f, _)| f == field))
        .collect();
    if !stale.is_empty() {
        let _: i64 = client.hdel(keys.admission_config(), stale).await?;
    }
    if !specs.is_empty() {
        let _: () = client.hset(keys.admission_config(), specs).await?;
    }
    Ok(())
}
