//! The protocol's four example dialogs over HTTP, in binary, JSON and text
//! format: each answer decodes and equals the fixture's response.

use megamind_core::{
    codec::Format,
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse,
        TScenarioRunRequest, TScenarioRunResponse,
    },
};
use prost_reflect::ReflectMessage;

use crate::helpers::{TestApp, decode_answer, fixture, fixture_body, spawn_demo};

const FORMATS: [(Format, &str); 3] =
    [(Format::Binary, "application/protobuf"), (Format::Json, "application/json"), (Format::Text, "text/protobuf")];

/// Sends fixture `request` of type `Req` to `path` in `format`; the answer must equal fixture `response`.
async fn step<Req, Resp>(app: &TestApp, path: &str, request: &str, response: &str, format: Format, media: &str)
where
    Req: ReflectMessage + Default,
    Resp: prost::Message + ReflectMessage + Default + PartialEq + std::fmt::Debug,
{
    let answer = app.post(path, media, None, fixture_body::<Req>(request, format)).await;
    assert_eq!(answer.status(), 200, "{path} {request} as {media}");
    let content_type = answer.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with(media), "answered in the request's format: {content_type}");
    let body = answer.bytes().await.unwrap();
    let got: Resp = decode_answer(&body, format);
    let want: Resp = fixture(response);
    assert!(got == want, "{path} {request} as {media}:\n got {got:?}\nwant {want:?}");
}

#[tokio::test]
async fn poi_run_only_with_callback_frame_actions() {
    let (app, _) = spawn_demo().await;
    for (format, media) in FORMATS {
        step::<TScenarioRunRequest, TScenarioRunResponse>(
            &app,
            "/demo/run",
            "poi_run_request",
            "poi_run_response",
            format,
            media,
        )
        .await;
        step::<TScenarioRunRequest, TScenarioRunResponse>(
            &app,
            "/demo/run",
            "poi_callback_run_request",
            "poi_callback_run_response",
            format,
            media,
        )
        .await;
    }
}

#[tokio::test]
async fn music_run_then_continue() {
    let (app, _) = spawn_demo().await;
    for (format, media) in FORMATS {
        step::<TScenarioRunRequest, TScenarioRunResponse>(
            &app,
            "/demo/run",
            "music_run_request",
            "music_run_response",
            format,
            media,
        )
        .await;
        step::<TScenarioApplyRequest, TScenarioContinueResponse>(
            &app,
            "/demo/continue",
            "music_continue_request",
            "music_continue_response",
            format,
            media,
        )
        .await;
    }
}

#[tokio::test]
async fn video_run_then_commit_sends_one_payment_push() {
    let (app, demo) = spawn_demo().await;
    for (format, media) in FORMATS {
        step::<TScenarioRunRequest, TScenarioRunResponse>(
            &app,
            "/demo/run",
            "video_commit_run_request",
            "video_commit_run_response",
            format,
            media,
        )
        .await;
        step::<TScenarioApplyRequest, TScenarioCommitResponse>(
            &app,
            "/demo/commit",
            "video_commit_request",
            "video_commit_response",
            format,
            media,
        )
        .await;
    }
    // One RequestId: the three formats replay the first commit.
    assert_eq!(demo.payment_pushes(), 1);
}

#[tokio::test]
async fn video_run_then_apply() {
    let (app, demo) = spawn_demo().await;
    for (format, media) in FORMATS {
        step::<TScenarioRunRequest, TScenarioRunResponse>(
            &app,
            "/demo/run",
            "video_apply_run_request",
            "video_apply_run_response",
            format,
            media,
        )
        .await;
        step::<TScenarioApplyRequest, TScenarioApplyResponse>(
            &app,
            "/demo/apply",
            "video_apply_request",
            "video_apply_response",
            format,
            media,
        )
        .await;
    }
    assert_eq!(demo.payment_pushes(), 1);
}

#[tokio::test]
async fn unprefixed_paths_serve_the_default_scenario() {
    let (app, _) = spawn_demo().await;
    step::<TScenarioRunRequest, TScenarioRunResponse>(
        &app,
        "/run",
        "poi_run_request",
        "poi_run_response",
        Format::Binary,
        "application/protobuf",
    )
    .await;
    step::<TScenarioApplyRequest, TScenarioContinueResponse>(
        &app,
        "/continue",
        "music_continue_request",
        "music_continue_response",
        Format::Binary,
        "application/protobuf",
    )
    .await;
}

#[tokio::test]
async fn accept_chooses_the_answer_format() {
    let (app, _) = spawn_demo().await;
    let body = fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary);
    let answer = app.post("/demo/run", "application/protobuf", Some("text/protobuf"), body).await;
    assert_eq!(answer.status(), 200);
    assert!(answer.headers()["content-type"].to_str().unwrap().starts_with("text/protobuf"));
    let text = answer.text().await.unwrap();
    assert!(text.contains("OutputSpeech: \"Я знаю, что по адресу Тверской бульвар"), "Cyrillic stays readable: {text}");
    let got: TScenarioRunResponse = decode_answer(text.as_bytes(), Format::Text);
    assert!(got == fixture::<TScenarioRunResponse>("poi_run_response"));
}

#[tokio::test]
async fn http2_prior_knowledge_is_served_on_the_same_port() {
    let (app, _) = spawn_demo().await;
    let h2 = megamind_core::http_client::client_builder().no_proxy().http2_prior_knowledge().build().unwrap();
    let answer = h2
        .post(app.url("/demo/run"))
        .header("content-type", "application/protobuf")
        .body(fixture_body::<TScenarioRunRequest>("poi_run_request", Format::Binary))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    let got: TScenarioRunResponse = decode_answer(&answer.bytes().await.unwrap(), Format::Binary);
    assert!(got == fixture::<TScenarioRunResponse>("poi_run_response"));
}
