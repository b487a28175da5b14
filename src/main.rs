//! The `argus` binary: parse the command line, hand it to the library, exit with its code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    argus::run(argus::cli::Cli::parse())
}
