//! The JSON report of a run. SecretFlow's four counts keep their names and meaning
//! (`intersection_count` is -1 for a party that does not receive the result); the rest is ours.

use serde::{Deserialize, Serialize};

/// Seconds spent in each stage.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Stages {
    /// Reading, parsing and keying the input.
    pub read_input_s: f64,
    /// Waiting for and connecting to the peer, plus the handshake.
    pub connect_s: f64,
    /// The PSI protocol itself, all buckets (with the per-bucket key counts).
    pub protocol_s: f64,
    /// Per bucket around the protocol: grouping rows by key, the join counts, the bucket's
    /// sorted output runs (and, spilled, loading its shards and checkpointing).
    #[serde(default)]
    pub join_s: f64,
    /// `min_intersection`'s cardinality pass, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cardinality_s: Option<f64>,
    /// Merging the sorted runs into the output file.
    pub write_output_s: f64,
    /// Wall time of the whole run.
    pub total_s: f64,
}

/// What a run did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// blindjoin version.
    pub version: String,
    /// This party's id.
    pub party: String,
    /// `ROLE_RECEIVER` or `ROLE_SENDER`.
    pub role: String,
    /// `PROTOCOL_ECDH`, ...
    pub protocol: String,
    /// The curve, if any.
    pub curve: Option<String>,
    /// The protocol mode (RR22: `fast`, `low_comm`, `malicious`), if the protocol has modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Hash buckets the run was split into (1 when not bucketed).
    #[serde(default = "one")]
    pub buckets: u64,
    /// Whether the input was spilled to disk in hash shards (large inputs).
    #[serde(default)]
    pub spilled: bool,
    /// With recovery: the bucket this run resumed at (0: from the start).
    #[serde(default)]
    pub resumed_at_bucket: u64,
    /// Rows in the input.
    pub original_count: i64,
    /// Unique keys in the input.
    pub original_key_count: i64,
    /// Rows of this party in the intersection (-1 when this party does not receive the result).
    pub intersection_count: i64,
    /// Unique keys in the intersection (-1 when this party does not receive the result).
    pub intersection_key_count: i64,
    /// Unique keys the peer brought (every PSI protocol reveals it); with more than one bucket,
    /// the keys it ran with, dummies included (see [`crate::bucket::padded_bucket_size`]); when
    /// `check_hash_digest` found the key sets equal, no bucket ran and it is our own key count.
    pub peer_key_count: i64,
    /// The output file, if one was written.
    pub output_path: Option<String>,
    /// Whether the output is sorted by key to align with the peer's.
    pub aligned: bool,
    /// Bytes this party sent, framing included.
    pub bytes_sent: u64,
    /// Bytes this party received.
    pub bytes_received: u64,
    /// Stage timings.
    pub stages: Stages,
    /// Seconds spent on each bucket (grouping, protocol, join counts, sorted runs).
    #[serde(default)]
    pub bucket_s: Vec<f64>,
    /// Peak resident memory of this process, in bytes (Linux; 0 elsewhere).
    pub peak_rss_bytes: u64,
    /// Peak resident memory during each bucket this process ran (Linux; empty elsewhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_peak_rss_bytes: Vec<u64>,
    /// |X ∩ Y| in unique keys, in the cardinality-only and threshold modes, for the parties
    /// that learn it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cardinality: Option<u64>,
    /// Unique keys of the intersection revealed, in threshold mode (`min(threshold, cardinality)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revealed_key_count: Option<u64>,
    /// With `check_hash_digest`: whether the two key sets were equal (then the protocol did not
    /// run and every key is in the intersection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_sets_equal: Option<bool>,
    /// What the user should know about this run's guarantees (the config's warnings, and e.g.
    /// that RR22's malicious mode does not protect the sender's output); empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Peak resident set size of this process (VmHWM), 0 if unknown.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Peak memory tracking that can restart, so each bucket's own peak shows (Linux: VmHWM, which
/// writing `5` to `/proc/self/clear_refs` resets to the current RSS).
#[derive(Default)]
pub struct PeakTracker {
    overall: u64,
}

impl PeakTracker {
    /// Starts a new window; remembers the peak of the one before.
    pub fn restart(&mut self) {
        self.overall = self.overall.max(peak_rss_bytes());
        // Best effort: where it fails the windows simply overlap.
        let _ = std::fs::write("/proc/self/clear_refs", b"5");
    }

    /// The peak of the current window, which also counts toward the whole run's peak. VmHWM is
    /// the process's: where two parties share a process (tests, the Python module), the other
    /// may reset it between this reading and our next `restart`, and the run's peak would then
    /// miss a bucket's.
    pub fn window_peak(&mut self) -> u64 {
        let peak = peak_rss_bytes();
        self.overall = self.overall.max(peak);
        peak
    }

    /// The peak of the whole process so far.
    pub fn overall(&self) -> u64 {
        self.overall.max(peak_rss_bytes())
    }
}

fn one() -> u64 {
    1
}

/// Writes `report` as pretty JSON to `path`, atomically (the unbalanced and labeled-PSI runs'
/// reports).
///
/// # Errors
/// The report cannot be encoded or written.
pub(crate) fn write_json<T: Serialize>(
    path: &std::path::Path,
    report: &T,
) -> Result<(), crate::error::DataError> {
    let json = serde_json::to_vec_pretty(report).map_err(|e| crate::error::DataError::Io {
        path: path.to_path_buf(),
        action: "encoding the report",
        source: std::io::Error::other(e),
    })?;
    crate::table::output::write_atomic(path, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_peak_counts_every_window_peak_even_after_a_reset_by_another_party() {
        let mut peak = PeakTracker::default();
        peak.restart();
        // A 64 MiB buffer touched and freed: the window's peak is above the RSS that follows.
        let mut v = vec![0u8; 64 << 20];
        v.iter_mut().step_by(4096).for_each(|b| *b = 1);
        std::hint::black_box(&v);
        drop(v);
        let window = peak.window_peak();
        // Another party in this process starts its own window: VmHWM falls to the current RSS.
        let _ = std::fs::write("/proc/self/clear_refs", b"5");
        peak.restart();
        assert!(peak.overall() >= window, "{} < {window}", peak.overall());
    }
}
