//! The HTTP router: every request the fast path ([`super::http`]) does not
//! take. It serves the server's own routes (`/healthz`, `/readyz` and
//! `/metrics`, any method), the routes scenarios registered, and answers the
//! rest: 405 for a scenario handler asked with another method than `POST`,
//! 404 listing the routes otherwise.
//!
//! Its answers stream (axum's [`Body`]); each request carries the server's
//! [`Shutdown`], so that a long-lived answer ends when the server drains.

use std::sync::Arc;

use axum::{
    Extension, Router,
    body::Body,
    extract::State,
    response::{IntoResponse, Response},
    routing::any,
};
use http::{HeaderValue, Method, StatusCode, Uri, header};

use super::http::{plain, target};
use crate::{app::App, scenario::Shutdown};

/// The router of `app`: the server's routes, then the scenarios'.
pub fn router(app: Arc<App>) -> Router {
    let scenario_routes = app.routes().clone();
    let shutdown: Shutdown = app.shutdown().clone();
    Router::new()
        .route("/healthz", any(healthz))
        .route("/readyz", any(readyz))
        .route("/metrics", any(metrics))
        .fallback(fallback)
        .with_state(app)
        .merge(scenario_routes)
        .layer(Extension(shutdown))
}

async fn healthz() -> Response {
    plain(StatusCode::OK, "ok\n").into_response()
}

/// Ready while not draining and while callers' tickets can be checked.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.is_draining() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response();
    }
    match app.dispatcher.authenticator().ready().await {
        Ok(()) => plain(StatusCode::OK, "ready\n").into_response(),
        Err(why) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut response = plain(StatusCode::OK, app.dispatcher.metrics().render());
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    response.headers_mut().insert(header::CONTENT_TYPE, content_type);
    response.into_response()
}

/// A scenario handler asked without `POST` (405), or no route at all (404).
async fn fallback(State(app): State<Arc<App>>, method: Method, uri: Uri) -> Response<Body> {
    let path = uri.path();
    if method != Method::POST && target(&app, path).is_some() {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "scenario handlers take POST\n");
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response.into_response();
    }
    let text = format!(
        "no such scenario handler: {}\nroutes: POST /{{scenario}}/{{run|continue|commit|apply}} \
         (scenarios: {}), POST /{{run|continue|commit|apply}} for the default scenario\n",
        crate::text::clip(path, crate::dispatch::call::MAX_ECHO),
        app.dispatcher.registry().listed()
    );
    plain(StatusCode::NOT_FOUND, text).into_response()
}
