//! The `megamind-scenario` binary: see [`megamind_scenario::cli`].

fn main() -> std::process::ExitCode {
    match megamind_scenario::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("megamind-scenario: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
