//! What the repository says is true of the code: the README's code map, the crate graph's
//! rules, `docs/openapi.json`, the observability files, the documented token snippets, and
//! every path a file names.

pub(crate) mod code_map;
pub(crate) mod crate_graph;
pub(crate) mod observability;
pub(crate) mod openapi;
pub(crate) mod paths;
pub(crate) mod readme_tokens;
