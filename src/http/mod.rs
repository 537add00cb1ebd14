//! The HTTP API (axum): auth, usage, earnings, payouts, admin, problem+json errors, OpenAPI.
