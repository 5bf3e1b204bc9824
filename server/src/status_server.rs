//! The live status page (`--ui-port`): the page itself, its JSON API and
//! each job's topology picture, over HTTP. Behind the Job API's token when
//! the server has one: a request carries it as `Authorization: Bearer`, or
//! a browser opens `/?token=...` once and keeps it in a cookie.
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::auth::Auth;
use crate::jobs::Jobs;
use crate::status_api;

const PAGE: &str = include_str!("status_page.html");
const COOKIE: &str = "beam_kafka_token";

#[derive(clap::Args, Clone, Debug, Default)]
pub struct UiArgs {
    /// Serve the live status page (and its JSON API) on this port (0 picks
    /// a free one); off without it.
    #[arg(long)]
    ui_port: Option<u16>,
    /// Address the status page listens on: localhost unless you mean to
    /// expose it (it is behind the Job API's token, if the server has one).
    #[arg(long, default_value = "127.0.0.1")]
    ui_bind: String,
}

#[derive(Clone)]
struct Ui {
    jobs: Arc<Jobs>,
    auth: Auth,
}

/// Starts serving if `--ui-port` was given; returns the address.
pub async fn start(args: &UiArgs, jobs: Arc<Jobs>, auth: Auth) -> anyhow::Result<Option<std::net::SocketAddr>> {
    let Some(port) = args.ui_port else { return Ok(None) };
    let listener = tokio::net::TcpListener::bind((args.ui_bind.as_str(), port))
        .await
        .with_context(|| format!("cannot listen on {}:{port} for the status page", args.ui_bind))?;
    let addr = listener.local_addr()?;
    crate::status_api::set_address(reachable(addr));
    let app = Router::new()
        .route("/", get(page))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/jobs", get(list))
        .route("/api/jobs/{id}", get(one))
        .route("/api/jobs/{id}/topology.svg", get(topology))
        .with_state(Ui { jobs, auth });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the status page stopped: {e}");
        }
    });
    tracing::info!("status page on http://{addr}/");
    Ok(Some(addr))
}

/// An address bound to every interface is reached by the host's name.
fn reachable(addr: std::net::SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        let host = beam_kafka_actors::status_board::this_copy();
        let host = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
        format!("{host}:{}", addr.port())
    } else {
        addr.to_string()
    }
}

/// The token a request presents: the Authorization header or the cookie.
fn presented(headers: &HeaderMap) -> Option<String> {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let cookie = || {
        headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == COOKIE).then(|| v.to_string())
        })
    };
    bearer.map(|b| b.trim().to_string()).or_else(cookie)
}

fn refused() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        "this status page needs the job server's token: open /?token=<token> once, or send Authorization: Bearer <token>\n",
    )
        .into_response()
}

async fn page(State(ui): State<Ui>, headers: HeaderMap, Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    if let Some(token) = q.get("token") {
        if !ui.auth.accepts(Some(token)) {
            return refused();
        }
        // Kept for the page's own requests; the address bar loses it.
        let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
        return (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, "/".to_string())]).into_response();
    }
    if !ui.auth.accepts(presented(&headers).as_deref()) {
        return refused();
    }
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], PAGE).into_response()
}

/// Liveness: the process answers. A job's troubles (a stalled task, a
/// failing commit) are on the page and in the metrics: restarting the
/// process would not cure them, and would move every task it runs.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: every job runs every task the group gave this copy, restored
/// (503 until then). Without the token (when the server has one) it says
/// only whether: the reasons name jobs and tasks.
async fn readyz(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    match crate::probes::ready(&ui.jobs) {
        Ok(()) => "ready\n".into_response(),
        Err(reasons) if ui.auth.accepts(presented(&headers).as_deref()) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", reasons.join("; "))).into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response(),
    }
}

async fn list(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    if !ui.auth.accepts(presented(&headers).as_deref()) {
        return refused();
    }
    Json(status_api::jobs(&ui.jobs)).into_response()
}

async fn one(State(ui): State<Ui>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !ui.auth.accepts(presented(&headers).as_deref()) {
        return refused();
    }
    match ui.jobs.by_id.get(&id).map(|j| j.clone()) {
        Some(job) => Json(status_api::job(&job)).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no job '{id}'\n")).into_response(),
    }
}

async fn topology(State(ui): State<Ui>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !ui.auth.accepts(presented(&headers).as_deref()) {
        return refused();
    }
    let svg = ui.jobs.by_id.get(&id).and_then(|j| j.topology_svg.get().cloned());
    match svg {
        Some(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no planned job '{id}'\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        assert_eq!(presented(&headers(&[(header::AUTHORIZATION, "Bearer abc ")])).as_deref(), Some("abc"));
        let cookies = headers(&[(header::COOKIE, "theme=dark; beam_kafka_token=s3cret"), (header::COOKIE, "other=1")]);
        assert_eq!(presented(&cookies).as_deref(), Some("s3cret"));
        assert_eq!(presented(&headers(&[(header::COOKIE, "beam_kafka_tokenX=no")])), None);
        assert_eq!(presented(&HeaderMap::new()), None);
    }

    #[test]
    fn a_server_with_a_token_refuses_other_tokens() {
        let auth = Auth::new(Some("0123456789abcdef".into()));
        assert!(auth.accepts(Some("0123456789abcdef")));
        assert!(!auth.accepts(Some("0123456789abcdeX")));
        assert!(!auth.accepts(None));
        assert!(Auth::default().accepts(None), "without a token, anyone on the bound address");
    }
}
