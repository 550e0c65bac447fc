//! The server with the built-in scenarios and `echo`, a scenario of its own:
//! `cargo run --example echo_scenario -- serve --echo-prefix "Вы сказали: "`,
//! then `POST /echo/run` and `GET /echo/last`. Every flag of `serve` works.

mod echo;

fn main() -> std::process::ExitCode {
    let mut modules = megamind_scenario::scenarios::modules();
    modules.push(Box::new(echo::EchoModule));
    match megamind_scenario::cli::main_with(modules) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("echo_scenario: {}", megamind_scenario::cli::report(&error));
            std::process::ExitCode::FAILURE
        }
    }
}
