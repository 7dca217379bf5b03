/// Where protocols report how far they are; the CLI draws bars, the Python API logs.
pub trait Progress: Sync {
    /// A new stage with `total` units of work begins.
    fn stage(&self, name: &'static str, total: u64);
    /// `n` more units are done.
    fn advance(&self, n: u64);
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _: &'static str, _: u64) {}
    fn advance(&self, _: u64) {}
}
