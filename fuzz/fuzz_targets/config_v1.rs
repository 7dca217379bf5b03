//! The v1 (SecretFlow `legacy_psi_config`) launch-config parser (`crates/data/src/config/
//! legacy.rs`, `parse_legacy_launch_config`): whatever text arrives, it ends in a plan or a
//! typed config error, never a panic. Paths resolve against a folder that does not exist, so
//! nothing is read or written. Input: the config text (invalid UTF-8 replaced).
#![no_main]

use blindjoin_data::parse_legacy_launch_config;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_legacy_launch_config(&text, "fuzz.json", Path::new("/nonexistent/bj-fuzz"));
});
