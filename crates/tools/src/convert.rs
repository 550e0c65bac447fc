//! `convert`: one protocol message between binary, JSON and text format.

use std::io::{Read, Write};

use anyhow::Context;
use clap::Args;
use megamind_core::codec::{self, Format};

use crate::bounded::read_at_most;

/// `convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Message type, short (`TScenarioRunRequest`) or full (`NAlice.NScenarios.TScenarioRunRequest`).
    #[arg(long = "type", short = 't')]
    pub message_type: String,
    /// Input format: binary, json or text.
    #[arg(long, value_parser = parse_format)]
    pub from: Format,
    /// Output format: binary, json or text.
    #[arg(long, value_parser = parse_format)]
    pub to: Format,
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::from_name(name).ok_or_else(|| format!("unknown format {name:?}: use binary, json or text"))
}

/// The longest message read: far past any body the server takes, and an
/// endless input (`< /dev/zero`) is refused, not read into memory.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Reads one message from `input` and writes it to `output` in another format.
pub fn convert(args: &ConvertArgs, input: impl Read, mut output: impl Write) -> anyhow::Result<()> {
    let desc = codec::message_descriptor(&args.message_type)?;
    let body = read_at_most(input, MAX_INPUT_BYTES)
        .context("cannot read stdin")?
        .ok_or_else(|| anyhow::anyhow!("the input is longer than {MAX_INPUT_BYTES} bytes"))?;
    let message = codec::decode_dynamic(desc, &body, args.from)?;
    output.write_all(&codec::encode_dynamic(&message, args.to)?)?;
    output.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_input_is_refused_at_its_bound() {
        let args = ConvertArgs { message_type: "TScenarioRunRequest".into(), from: Format::Binary, to: Format::Text };
        let error = convert(&args, std::io::repeat(0), std::io::sink()).unwrap_err();
        assert_eq!(error.to_string(), format!("the input is longer than {MAX_INPUT_BYTES} bytes"));
    }
}
