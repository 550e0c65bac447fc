//! `deploy/megamind/registration.yaml`, what the Megamind team registers,
//! against the server as `serve` runs it: each scenario answers the
//! handlers listed and refuses the others as `unsupported`, its timeouts
//! are the server's budgets, and the TVM sources are Megamind's.

use std::path::Path;

use megamind_core::{
    config::MEGAMIND_TVM_IDS,
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioBaseRequest, TScenarioRunRequest},
    scenario::Handler,
};
use prost::Message;
use serde_json::Value;

use crate::helpers::{served_config, spawn_builtin};

fn registration() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/megamind/registration.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/megamind/registration.yaml");
    serde_saphyr::from_str(&text).expect("the registration is YAML")
}

/// The smallest request of `handler`, with a `RequestId`.
fn request(handler: Handler) -> Vec<u8> {
    let base_request = Some(TScenarioBaseRequest { request_id: format!("registered-{handler}"), ..Default::default() });
    match handler {
        Handler::Run => TScenarioRunRequest { base_request, ..Default::default() }.encode_to_vec(),
        _ => TScenarioApplyRequest { base_request, ..Default::default() }.encode_to_vec(),
    }
}

#[tokio::test]
async fn each_scenario_registered_answers_its_handlers_within_the_servers_budgets() {
    let registration = registration();
    let config = served_config();
    let app = spawn_builtin(config.clone()).await;
    let scenarios = registration["scenarios"].as_array().expect("scenarios");
    let names: Vec<&str> = scenarios.iter().filter_map(|s| s["name"].as_str()).collect();
    let served: Vec<String> = megamind_scenario::scenarios::modules().iter().map(|m| m.name().to_owned()).collect();
    assert_eq!(names, served, "every scenario the server hosts, and no other");
    for scenario in scenarios {
        let name = scenario["name"].as_str().expect("a name");
        let url = scenario["url"].as_str().expect("a url");
        assert!(url.ends_with(&format!("/{name}")), "{name}: its path prefix is its name: {url}");
        let listed: Vec<&str> =
            scenario["handlers"].as_array().expect("handlers").iter().filter_map(Value::as_str).collect();
        for handler in Handler::ALL {
            let (status, body) = app.post_binary(&format!("/{name}/{handler}"), request(handler)).await;
            assert_eq!(status, 200, "/{name}/{handler}");
            let unsupported = body.windows(11).any(|w| w == b"unsupported");
            assert_eq!(unsupported, !listed.contains(&handler.as_str()), "/{name}/{handler}: {body:?}");
            if listed.contains(&handler.as_str()) {
                let budget = match handler {
                    Handler::Run => config.budget.run_ms,
                    Handler::Continue => config.budget.continue_ms,
                    Handler::Commit => config.budget.commit_ms,
                    Handler::Apply => config.budget.apply_ms,
                };
                assert_eq!(scenario["timeout_ms"][handler.as_str()].as_u64(), Some(budget), "/{name}/{handler}");
            }
        }
        let timeouts = scenario["timeout_ms"].as_object().expect("timeout_ms").len();
        assert_eq!(timeouts, listed.len(), "{name}: a timeout for each handler and no other");
    }
    let sources = &registration["tvm"]["sources"];
    assert_eq!(
        [sources["testing"].as_u64(), sources["production"].as_u64()],
        MEGAMIND_TVM_IDS.map(|id| Some(u64::from(id)))
    );
}
