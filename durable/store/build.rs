//! `sqlx::migrate!` embeds `migrations/` at compile time, and cargo does not see that on stable:
//! without this, a changed or added migration leaves the binaries on the old set.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
