/// Where protocols report how far they are; the CLI draws bars, the Python API logs.
///
/// A run is a sequence of stages (reading the input, the buckets, writing the output). A stage
/// made of several protocol runs (one per bucket) shows each run's own stages as *phases* of
/// the current unit of work: the data path hands the protocol a [`Phases`] of its progress, so
/// the items through each protocol phase stay visible while the bucket count does not move.
/// Every method but `stage` and `advance` does nothing by default: a reporter that only knows
/// stages keeps working unchanged.
pub trait Progress: Sync {
    /// A new stage with `total` units of work begins.
    fn stage(&self, name: &'static str, total: u64);
    /// `n` more units are done.
    fn advance(&self, n: u64);
    /// A new stage with `total` units of `unit` begins (bytes of a file, rows, buckets); a
    /// plain [`Progress::stage`] counts items.
    fn stage_in(&self, name: &'static str, total: u64, unit: Unit) {
        let _ = unit;
        self.stage(name, total);
    }
    /// A phase of the current stage's unit of work begins (a protocol phase inside a bucket),
    /// with `total` items (0 when unknown).
    fn phase(&self, name: &'static str, total: u64) {
        let _ = (name, total);
    }
    /// `n` more items of the current phase are done.
    fn phase_advance(&self, n: u64) {
        let _ = n;
    }
}

/// What a stage counts, so a reporter can show rates in units a person reads (MiB/s, rows/s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Protocol items (deduplicated keys).
    Items,
    /// Table rows.
    Rows,
    /// Bytes of a file.
    Bytes,
    /// Hash buckets, each one protocol run (whose stages arrive as phases).
    Buckets,
}

impl Unit {
    /// The unit's name in a count ("items", "rows", "bytes", "buckets").
    pub fn name(self) -> &'static str {
        match self {
            Unit::Items => "items",
            Unit::Rows => "rows",
            Unit::Bytes => "bytes",
            Unit::Buckets => "buckets",
        }
    }
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _: &'static str, _: u64) {}
    fn advance(&self, _: u64) {}
}

/// Reports a nested run's stages as phases of the outer progress's current stage: what a
/// bucket's protocol run is given, so its items show without replacing the bucket count.
pub struct Phases<'a>(pub &'a dyn Progress);

impl Progress for Phases<'_> {
    fn stage(&self, name: &'static str, total: u64) {
        self.0.phase(name, total);
    }
    fn advance(&self, n: u64) {
        self.0.phase_advance(n);
    }
    fn stage_in(&self, name: &'static str, total: u64, _: Unit) {
        self.0.phase(name, total);
    }
}
