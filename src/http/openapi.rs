//! The OpenAPI 3 document, generated from the handlers and types (utoipa).

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{admin, dashboard, stream, usage};

/// `GET /openapi.json`
#[derive(OpenApi)]
#[openapi(
    info(
        title = "settle",
        description = "Settlement and payout engine of a GPU compute marketplace. Money is USDC as decimal strings with exactly 6 fractional digits; instants are RFC 3339 UTC with milliseconds; errors are application/problem+json with a stable `code`; lists page with `limit` and the opaque `next_cursor`. Any request may be answered 503 with `Retry-After`: `overloaded` (http.concurrency_max requests running and http.queue_max waiting; nothing of it was read or done) or `request_timeout` (not done within http.request_timeout_ms; its uncommitted work was rolled back, so sending it again books it once)."
    ),
    paths(
        usage::post_usage,
        super::reliability::post_online,
        super::profile::show,
        dashboard::summary,
        dashboard::reliability,
        dashboard::earnings,
        dashboard::earnings_csv,
        dashboard::gpus,
        dashboard::payouts,
        dashboard::payouts_csv,
        super::statement::payout,
        super::statement::period,
        stream::stream,
        admin::void_usage,
        admin::post_adjustment,
        super::profile::erase,
        admin::import,
        admin::run_report,
        admin::list_approvals,
        admin::show_approval,
        admin::approve,
        admin::reject,
        super::healthz,
        super::readyz,
    ),
    components(schemas(stream::StreamEntry, stream::ReliabilityMark)),
    modifiers(&BankRoutes, &BearerAuth, &Unavailable),
    tags(
        (name = "usage", description = "Metered usage ingestion (ingest, metering and admin tokens)"),
        (name = "dashboard", description = "Provider earnings and payouts (the provider's own token or admin)"),
        (name = "admin", description = "Corrections, imports, run reports, bank batches and dual-control approvals (admin tokens)"),
        (name = "ops", description = "Health"),
    )
)]
pub struct ApiDoc;

/// The bank routes (`/v1/admin/bank/…`, src/http/bank.rs) with their schemas.
struct BankRoutes;

impl Modify for BankRoutes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        openapi.merge(super::bank::BankApiDoc::openapi());
    }
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        // The dashboard page's sign-in cookie: accepted on GET routes only.
        components.add_security_scheme(
            "session_cookie",
            SecurityScheme::ApiKey(utoipa::openapi::security::ApiKey::Cookie(
                utoipa::openapi::security::ApiKeyValue::with_description(
                    "settle_session",
                    "The dashboard's sign-in cookie (POST /dashboard/login); reads only",
                ),
            )),
        );
    }
}

/// 503 `overloaded` / `request_timeout` on every operation that documents no 503 of its own
/// (`/readyz` answers 503 with its health body).
struct Unavailable;

impl Modify for Unavailable {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{Ref, Type};
        use utoipa::openapi::{ContentBuilder, HeaderBuilder, ResponseBuilder};
        let response = ResponseBuilder::new()
            .description(
                "`overloaded`: too many requests running and waiting; `request_timeout`: not \
                 done in time, its uncommitted work rolled back. Retry after `Retry-After` \
                 seconds.",
            )
            .content(
                "application/problem+json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(utoipa::openapi::schema::Object::with_type(Type::Integer))
                    .description(Some("Seconds to wait before retrying."))
                    .build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                operation
                    .responses
                    .responses
                    .entry("503".to_owned())
                    .or_insert_with(|| response.clone().into());
            }
        }
    }
}
