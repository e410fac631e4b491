//! The operator's settings an application's scripts read from its `meta` hash: pauses
//! (`control.lua`) and the shared budgets (`app_limits.lua`). Each call that changes one stores
//! it at once; this is where everything else converges (a rebuild, a catalog refresh after a
//! write whose Redis side failed). Each value carries its revision and the newest one wins in
//! Redis, so a refresh racing a newer change never brings an older value back.

use sqlx::PgPool;

use crate::DurableError;
use crate::ids::ApplicationId;
use crate::{budgets, control};
use sluice_redis::Projection;

/// Stores the pauses and budgets of `application_id` as PostgreSQL holds them now.
pub async fn refresh(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<(), DurableError> {
    let pauses = control::pauses_of(pg, application_id).await?;
    control::store_in_redis(redis, application_id, &pauses).await?;
    let (revision, shared) = budgets::budgets_now(pg, application_id).await?;
    budgets::store_in_redis(redis, application_id, revision, shared).await
}
