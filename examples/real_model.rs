//! Plays a dialog with the assistant of a running server the way a client
//! does (run → continue, callbacks followed, `State` carried) and prints a
//! table: utterance, `/run` ms, `/continue` ms, callback hops, what was said,
//! directives. `scripts/real-model.sh` runs it against a real model.
//!
//! `cargo run --release --example real_model -- [--server URL] [--scenario NAME] [UTTERANCE...]`
//! Exit code 0 (it is a report, whatever the model says), 2 when the server
//! cannot be reached.

use std::{process::ExitCode, time::Duration};

use megamind_core::{
    proto::n_alice::n_scenarios::{TDirective, t_directive},
    scenario::Handler,
};
use megamind_tools::client::{Client, ClientError};

const DIALOG: [&str; 5] =
    ["Открой Safari", "закрой калькулятор", "open Telegram", "привет, как дела?", "расскажи короткую сказку"];

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut server, mut scenario, mut utterances) =
        ("http://127.0.0.1:18081".to_owned(), "assistant".to_owned(), Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--server" => server = args.next().unwrap_or_default(),
            "--scenario" => scenario = args.next().unwrap_or_default(),
            "-h" | "--help" => {
                println!("real_model [--server URL] [--scenario NAME] [UTTERANCE...]");
                return ExitCode::SUCCESS;
            }
            _ => utterances.push(arg),
        }
    }
    if utterances.is_empty() {
        utterances = DIALOG.map(String::from).to_vec();
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    match runtime.block_on(play(&server, &scenario, &utterances)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("real_model: {server}: {error}");
            ExitCode::from(2)
        }
    }
}

async fn play(server: &str, scenario: &str, utterances: &[String]) -> Result<(), ClientError> {
    let mut client = Client::http(server)?.with_scenario(scenario).with_timeout(Duration::from_secs(5));
    println!("| utterance | /run ms | /continue ms | callback hops | said | directives |");
    println!("|---|---:|---:|---:|---|---|");
    let (mut answered, mut hops_total) = (0, 0);
    for words in utterances {
        let turn = client.say(words).await?;
        let ms = |handler: Handler| {
            turn.hops
                .iter()
                .find(|hop| hop.handler() == handler)
                .map_or("-".to_owned(), |hop| format!("{}", hop.took.as_millis()))
        };
        let hops = turn.hops.iter().filter(|hop| hop.handler() == Handler::Run).count().saturating_sub(1);
        hops_total += hops;
        let intent = turn.body().analytics_info.as_ref().map_or("", |info| info.intent.as_str());
        if intent != "assistant.apology" && intent != "assistant.hold" {
            answered += 1;
        }
        let said = turn.speeches().iter().map(|s| clip(s, 120)).collect::<Vec<_>>().join(" / ");
        let directives = turn.directives().iter().filter_map(directive).collect::<Vec<_>>().join(", ");
        println!(
            "| {words} | {} | {} | {hops} | {} | {directives} |",
            ms(Handler::Run),
            ms(Handler::Continue),
            said.replace('|', "¦").replace('\n', " ")
        );
    }
    let n = utterances.len().max(1);
    println!(
        "\nanswered without a repeat: {answered}/{} ({:.0} %); callback hops per turn: {:.1}",
        utterances.len(),
        100.0 * answered as f64 / n as f64,
        hops_total as f64 / n as f64
    );
    Ok(())
}

/// `open_app(Safari)`; callbacks are the protocol's plumbing, not shown.
fn directive(directive: &TDirective) -> Option<String> {
    match directive.directive.as_ref()? {
        t_directive::Directive::OpenAppDirective(open) => {
            Some(format!("open_app({})", if open.app_name.is_empty() { &open.app_path } else { &open.app_name }))
        }
        t_directive::Directive::CloseAppDirective(close) => Some(format!("close_app({})", close.app_name)),
        t_directive::Directive::CallbackDirective(_) => None,
        other => Some(format!("{other:?}").chars().take(60).collect()),
    }
}

fn clip(text: &str, chars: usize) -> String {
    let mut clipped: String = text.chars().take(chars).collect();
    if clipped.len() < text.len() {
        clipped.push('…');
    }
    clipped
}
