//! Wire formats shared by the CLI and the HTTP API.

pub mod import;
pub mod reliability;
