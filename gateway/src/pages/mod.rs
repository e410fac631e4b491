//! What the gateway serves to browsers from files embedded in the binary.
//!
//! - [`ui`]: the operator dashboard at `/ui/`.
//! - [`sdk`]: the browser module (`/sdk/v1/`) and the hosted waiting page (`/wait/…`).
//! - [`demo`]: the demo sale page (`/demo/`, served by `sluice dev` only).

pub mod demo;
pub mod sdk;
pub mod ui;
