//! The bare baselines the load benchmark compares against: they only decode
//! the request and encode a fixed answer, with no routing, rules or logging.

#![allow(dead_code)]

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use megamind_core::{
    codec::Format,
    proto::n_alice::n_scenarios::{TScenarioRunRequest, TScenarioRunResponse},
};
use prost::Message;

/// The fixed answer (the POI fixture) and a runtime like our server's.
fn answer_and_runtime() -> (TScenarioRunResponse, tokio::runtime::Runtime) {
    let answer = megamind_core::codec::decode(
        &super::bodies::fixture_body("poi_run_response", "TScenarioRunResponse", Format::Binary),
        Format::Binary,
    )
    .expect("fixture decodes");
    (answer, tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime"))
}

/// Serves the bare HTTP baseline on an ephemeral port until killed; prints `addr=...`.
pub fn serve_http() {
    let (answer, runtime) = answer_and_runtime();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("baseline addr={}", listener.local_addr().expect("addr"));
        let answer = std::sync::Arc::new(answer);
        loop {
            let (stream, _) = listener.accept().await.expect("accept");
            stream.set_nodelay(true).expect("nodelay");
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let answer = answer.clone();
                    async move {
                        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let _request = TScenarioRunRequest::decode(body).unwrap_or_default();
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(answer.encode_to_vec()))))
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
}

/// The bare gRPC baseline: tonic's own server, `Run` decodes and answers a
/// fixed response; prints `addr=...` and serves until killed.
pub fn serve_grpc() {
    use megamind_core::proto::{
        megamind_scenario::v1::scenario_server::{Scenario, ScenarioServer},
        n_alice::n_scenarios::{
            TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse,
        },
    };
    use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

    struct Bare(TScenarioRunResponse);

    #[tonic::async_trait]
    impl Scenario for Bare {
        async fn run(&self, _: GrpcRequest<TScenarioRunRequest>) -> Result<GrpcResponse<TScenarioRunResponse>, Status> {
            Ok(GrpcResponse::new(self.0.clone()))
        }
        async fn r#continue(
            &self,
            _: GrpcRequest<TScenarioApplyRequest>,
        ) -> Result<GrpcResponse<TScenarioContinueResponse>, Status> {
            Err(Status::unimplemented("baseline"))
        }
        async fn commit(
            &self,
            _: GrpcRequest<TScenarioApplyRequest>,
        ) -> Result<GrpcResponse<TScenarioCommitResponse>, Status> {
            Err(Status::unimplemented("baseline"))
        }
        async fn apply(
            &self,
            _: GrpcRequest<TScenarioApplyRequest>,
        ) -> Result<GrpcResponse<TScenarioApplyResponse>, Status> {
            Err(Status::unimplemented("baseline"))
        }
    }

    let (answer, runtime) = answer_and_runtime();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("baseline addr={}", listener.local_addr().expect("addr"));
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(ScenarioServer::new(Bare(answer)))
            .serve_with_incoming(incoming)
            .await
            .expect("serve");
    });
}
