//! `debug_options.trace_path`: a trace of one run's stages (read, connect, handshake, each
//! bucket's protocol and join, merge, write) in Chrome's trace-event JSON, the `traceEvents`
//! array that Perfetto (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! A run is traced by [`record`], which installs a recorder on the calling thread; the
//! pipelines mark their stages with [`span`] / [`bucket_span`] guards, which cost one
//! thread-local read when no recorder is installed. The recorder is per thread, not per
//! process, because two parties may share a process (tests, the Python module) and each must
//! get its own trace. Stages run on the run's own thread; work a stage hands to rayon's pool is
//! inside its stage's span.
//!
//! Each finished span is also a line on stderr at `logging_level` `debug` (stages) or `trace`
//! (buckets too): see [`crate::log`].

use crate::error::DataError;
use crate::log::{Level, enabled};
use crate::table::output::write_atomic;
use serde::Serialize;
use std::cell::RefCell;
use std::path::Path;
use std::time::Instant;

/// One finished span, as a trace-event "complete" event (`ph: "X"`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Event {
    /// What ran: "read input", "bucket", ...
    pub name: String,
    /// `stage` or `bucket`.
    pub cat: &'static str,
    /// The event type: always `X` (complete: a start and a duration).
    pub ph: &'static str,
    /// Start, in microseconds since the run began.
    pub ts: f64,
    /// Duration in microseconds.
    pub dur: f64,
    /// The process (always 1: one party per trace).
    pub pid: u32,
    /// The thread (always 1: the run's thread).
    pub tid: u32,
    /// The bucket's index, for bucket events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<BucketArg>,
}

/// A bucket event's argument.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct BucketArg {
    /// The bucket's index.
    pub bucket: u64,
}

struct Recorder {
    start: Instant,
    events: Vec<Event>,
}

thread_local! {
    static RECORDER: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// A stage in progress; it is recorded (and logged at `debug`) when dropped.
#[must_use = "a span records the time until it is dropped"]
pub struct Span {
    name: &'static str,
    cat: &'static str,
    bucket: Option<u64>,
    start: Instant,
}

/// Marks a stage of the run until the guard drops.
pub fn span(name: &'static str) -> Span {
    Span {
        name,
        cat: "stage",
        bucket: None,
        start: Instant::now(),
    }
}

/// Marks one bucket's work (`name`: "bucket", "protocol", "join") until the guard drops.
pub fn bucket_span(name: &'static str, bucket: usize) -> Span {
    Span {
        name,
        cat: "bucket",
        bucket: Some(bucket as u64),
        start: Instant::now(),
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let end = Instant::now();
        let secs = end.duration_since(self.start).as_secs_f64();
        let level = if self.bucket.is_some() {
            Level::Trace
        } else {
            Level::Debug
        };
        if enabled(level) {
            match self.bucket {
                Some(b) => {
                    crate::log::emit(level, &format!("{} of bucket {b}: {secs:.3} s", self.name))
                }
                None => crate::log::emit(level, &format!("{}: {secs:.3} s", self.name)),
            }
        }
        let _ = RECORDER.try_with(|r| {
            if let Ok(mut r) = r.try_borrow_mut()
                && let Some(rec) = r.as_mut()
            {
                let ts = self
                    .start
                    .saturating_duration_since(rec.start)
                    .as_secs_f64()
                    * 1e6;
                rec.events.push(Event {
                    name: self.name.to_string(),
                    cat: self.cat,
                    ph: "X",
                    ts,
                    dur: secs * 1e6,
                    pid: 1,
                    tid: 1,
                    args: self.bucket.map(|bucket| BucketArg { bucket }),
                });
            }
        });
    }
}

/// The trace file: the events in start order (an enclosing stage before the buckets inside it),
/// plus the process's name (`party` and the kind of run) for the viewer's track.
#[derive(Serialize)]
struct TraceFile<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<serde_json::Value>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'a str,
}

/// Runs `f` with a recorder on this thread when `path` is given, then writes the trace there
/// (atomically, mode 0600), whether `f` succeeded or not: a failed run's trace shows where it
/// stopped. `name` labels the process track ("blindjoin receiver (two-party)").
///
/// # Errors
/// The run's result is returned as is; the second value is the trace file's write error, if any.
pub fn record<T>(
    path: Option<&Path>,
    name: &str,
    f: impl FnOnce() -> T,
) -> (T, Result<(), DataError>) {
    let Some(path) = path else {
        return (f(), Ok(()));
    };
    let outer = RECORDER.with(|r| {
        r.borrow_mut().replace(Recorder {
            start: Instant::now(),
            events: Vec::new(),
        })
    });
    let out = {
        let _whole = span("run");
        f()
    };
    let events = RECORDER
        .with(|r| std::mem::replace(&mut *r.borrow_mut(), outer))
        .map(|r| r.events)
        .unwrap_or_default();
    (out, write(path, name, events))
}

fn write(path: &Path, name: &str, mut events: Vec<Event>) -> Result<(), DataError> {
    // Start order; among spans that start together, the longer (enclosing) one first.
    events.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.dur.total_cmp(&a.dur)));
    let mut all = vec![serde_json::json!({
        "name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": { "name": name }
    })];
    all.extend(events.iter().filter_map(|e| serde_json::to_value(e).ok()));
    let file = TraceFile {
        trace_events: all,
        display_time_unit: "ms",
    };
    let mut json = serde_json::to_vec(&file).unwrap_or_default();
    json.push(b'\n');
    write_atomic(path, &json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bj-trace-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_recorded_run_is_trace_event_json_in_start_order_and_private() {
        let dir = temp_dir("order");
        let path = dir.join("run.trace");
        let ((), written) = record(Some(&path), "test party", || {
            {
                let _a = span("read input");
            }
            let _p = span("protocol");
            for b in 0..3 {
                let _b = bucket_span("bucket", b);
            }
        });
        written.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "process_name",
                "run",
                "read input",
                "protocol",
                "bucket",
                "bucket",
                "bucket"
            ]
        );
        let mut last = 0.0;
        for e in &events[1..] {
            assert_eq!(e["ph"], "X");
            let ts = e["ts"].as_f64().unwrap();
            assert!(ts >= last && e["dur"].as_f64().unwrap() >= 0.0);
            last = ts;
        }
        let buckets: Vec<u64> = events[4..]
            .iter()
            .map(|e| e["args"]["bucket"].as_u64().unwrap())
            .collect();
        assert_eq!(buckets, [0, 1, 2]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn without_a_path_nothing_is_recorded_and_a_failed_run_still_writes_its_trace() {
        let (v, w) = record(None, "x", || 7);
        assert_eq!(v, 7);
        assert!(w.is_ok());
        let _no_recorder = span("ignored");
        let dir = temp_dir("failed");
        let path = dir.join("failed.trace");
        let (r, w) = record(Some(&path), "x", || -> Result<(), ()> {
            let _s = span("read input");
            Err(())
        });
        assert!(r.is_err() && w.is_ok());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"read input\""));
    }

    #[test]
    fn each_thread_records_only_its_own_run() {
        let dir = temp_dir("threads");
        let (a, b) = (dir.join("a.trace"), dir.join("b.trace"));
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            record(Some(&b2), "b", || {
                let _s = span("sender stage");
            })
            .1
        });
        record(Some(&a), "a", || {
            let _s = span("receiver stage");
        })
        .1
        .unwrap();
        t.join().unwrap().unwrap();
        let a = std::fs::read_to_string(&a).unwrap();
        let b = std::fs::read_to_string(&b).unwrap();
        assert!(a.contains("receiver stage") && !a.contains("sender stage"));
        assert!(b.contains("sender stage") && !b.contains("receiver stage"));
    }
}
