//! `convert`: one protocol message between binary, JSON and text format.

use std::io::{Read, Write};

use anyhow::Context;
use clap::Args;
use megamind_core::codec::{self, Format};

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

/// Reads one message from `input` and writes it to `output` in another format.
pub fn convert(args: &ConvertArgs, mut input: impl Read, mut output: impl Write) -> anyhow::Result<()> {
    let desc = codec::message_descriptor(&args.message_type)?;
    let mut body = Vec::new();
    input.read_to_end(&mut body).context("cannot read stdin")?;
    let message = codec::decode_dynamic(desc, &body, args.from)?;
    output.write_all(&codec::encode_dynamic(&message, args.to)?)?;
    output.flush()?;
    Ok(())
}
