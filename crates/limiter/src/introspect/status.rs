//! `GET /status`: the status page, one static HTML file whose inline script
//! reads `/v1/limits`, `/v1/top`, `/healthz` and `/metrics` of the same
//! limiter and refreshes itself. No build step: the file is embedded as is.

use super::{off, Introspect};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page, as served.
const PAGE: &str = include_str!("status.html");

/// Scripts and styles only from the page itself, requests only to this
/// limiter: the page loads nothing from elsewhere.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'";

pub(super) async fn page<S>(State(st): State<Introspect<S>>) -> Response {
    if st.inspector.is_none() {
        return off();
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, CSP),
        ],
        PAGE,
    )
        .into_response()
}
