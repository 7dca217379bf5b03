//! Tests across modules: the scheme end to end against plaintext arithmetic mod t.

mod bfv;
mod rounded;
