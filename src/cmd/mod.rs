//! One module per subcommand: its argument struct, `run`, and its output formatting.

pub mod bench;
pub mod generate;
pub mod probe_ops;
pub mod verify_golden;

/// An error and its causes on one line, outermost first.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text.lines().next().unwrap_or_default().trim().to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
