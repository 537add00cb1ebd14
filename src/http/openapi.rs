//! The OpenAPI 3 document, generated from the handlers and types (utoipa).

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{admin, dashboard, usage};

/// `GET /openapi.json`
#[derive(OpenApi)]
#[openapi(
    info(
        title = "settle",
        description = "Settlement and payout engine of a GPU compute marketplace. Money is USDC as decimal strings with exactly 6 fractional digits; instants are RFC 3339 UTC with milliseconds; errors are application/problem+json with a stable `code`; lists page with `limit` and the opaque `next_cursor`."
    ),
    paths(
        usage::post_usage,
        dashboard::summary,
        dashboard::earnings,
        dashboard::earnings_csv,
        dashboard::gpus,
        dashboard::payouts,
        dashboard::payouts_csv,
        admin::void_usage,
        admin::post_adjustment,
        admin::import,
        admin::run_report,
        super::healthz,
        super::readyz,
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "usage", description = "Metered usage ingestion (ingest, metering and admin tokens)"),
        (name = "dashboard", description = "Provider earnings and payouts (the provider's own token or admin)"),
        (name = "admin", description = "Corrections and imports (admin tokens)"),
        (name = "ops", description = "Health"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
