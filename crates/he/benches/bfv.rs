//! Placeholder until the speed item.
fn main() {}
