//! What the CLI tests share: running the built binary from the repository root.

use std::process::{Command, Output};

pub fn g4(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_g4"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run g4")
}
