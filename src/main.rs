//! The `tessera` command.
fn main() {}
