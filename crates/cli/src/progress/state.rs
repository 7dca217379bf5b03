//! What the progress line says: the current stage, the protocol phase inside it (a bucket's
//! protocol run), how much of the stage is done and when it will end.
//!
//! Pure state with the clock passed in, so the text and the estimate are tested without a
//! terminal.

use super::units;
use blindjoin_data::Unit;
use std::time::{Duration, Instant};

/// The stage being drawn.
#[derive(Debug)]
pub(crate) struct Stage {
    total: u64,
    unit: Unit,
    done: u64,
    start: Instant,
    /// The protocol phase of the bucket under way, when the stage reports phases.
    phase: Option<Phase>,
    /// Phase items done over the whole stage, and at the end of the last finished bucket.
    items: u64,
    items_at_last_bucket: u64,
}

/// A protocol phase inside the current unit of work.
#[derive(Debug)]
struct Phase {
    name: &'static str,
    total: u64,
    done: u64,
    start: Instant,
}

impl Stage {
    pub(crate) fn new(total: u64, unit: Unit, now: Instant) -> Stage {
        Stage {
            total,
            unit,
            done: 0,
            start: now,
            phase: None,
            items: 0,
            items_at_last_bucket: 0,
        }
    }

    /// `n` more units of the stage are done (for buckets: the bucket under way ended).
    pub(crate) fn advance(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        self.items_at_last_bucket = self.items;
        if self.unit == Unit::Buckets {
            self.phase = None;
        }
    }

    pub(crate) fn phase(&mut self, name: &'static str, total: u64, now: Instant) {
        self.phase = Some(Phase {
            name,
            total,
            done: 0,
            start: now,
        });
    }

    pub(crate) fn phase_advance(&mut self, n: u64) {
        self.items = self.items.saturating_add(n);
        if let Some(p) = self.phase.as_mut() {
            p.done = p.done.saturating_add(n);
        }
    }

    /// How much of the stage is done, 0..=1; `None` when there is nothing to go on (no total, or
    /// the first bucket still running, whose size in items is not known yet).
    ///
    /// Buckets are counted by the items through their phases: once a bucket has finished, the
    /// items per bucket are known, and the bucket under way counts for the share of them its
    /// phases have moved (at most one bucket's worth).
    pub(crate) fn fraction(&self) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let whole = self.done.min(self.total) as f64 / self.total as f64;
        if self.unit != Unit::Buckets {
            return Some(whole);
        }
        if self.done == 0 || self.items_at_last_bucket == 0 {
            return (self.done > 0).then_some(whole);
        }
        let per_bucket = self.items_at_last_bucket as f64 / self.done as f64;
        let current = (self.items - self.items_at_last_bucket) as f64 / per_bucket;
        let share = current.min(1.0) / self.total as f64;
        Some((whole + share).min(1.0))
    }

    /// The time left in the stage, from the share done over the stage's elapsed time.
    pub(crate) fn eta(&self, now: Instant) -> Option<Duration> {
        units::eta(now.duration_since(self.start), self.fraction()?)
    }

    /// The text after the bar: counts and rate in the stage's unit, the phase under way with its
    /// items and rate, then the ETA (of the phase while the stage has none yet).
    pub(crate) fn detail(&self, now: Instant) -> String {
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let mut parts = Vec::new();
        match self.unit {
            Unit::Bytes => parts.push(format!(
                "{}/{}  {}",
                units::bytes(self.done as f64),
                units::bytes(self.total as f64),
                units::bytes_rate(rate(self.done, elapsed)),
            )),
            Unit::Buckets => parts.push(format!(
                "{}/{} buckets",
                units::count(self.done),
                units::count(self.total)
            )),
            Unit::Items | Unit::Rows if self.total > 0 => parts.push(format!(
                "{}/{} {}  {}",
                units::count(self.done),
                units::count(self.total),
                self.unit.name(),
                units::count_rate(rate(self.done, elapsed), self.unit.name()),
            )),
            Unit::Items | Unit::Rows => {}
        }
        if let Some(p) = &self.phase {
            let p_elapsed = now.duration_since(p.start).as_secs_f64();
            let counts = if p.total > 0 {
                format!(
                    " {}/{}  {}",
                    units::count(p.done),
                    units::count(p.total),
                    units::count_rate(rate(p.done, p_elapsed), "items")
                )
            } else {
                String::new()
            };
            parts.push(format!("{}{counts}", p.name));
        }
        match self.eta(now) {
            Some(left) => parts.push(format!("eta {}", units::duration(left))),
            None => {
                let phase_left = self.phase.as_ref().and_then(|p| {
                    let f = p.done.min(p.total) as f64 / p.total as f64;
                    units::eta(now.duration_since(p.start), f)
                });
                match phase_left {
                    Some(left) => parts.push(format!("phase eta {}", units::duration(left))),
                    None if self.total > 0 => parts.push("eta --".to_string()),
                    None => parts.push(units::duration(now.duration_since(self.start))),
                }
            }
        }
        parts.join(" · ")
    }
}

fn rate(done: u64, secs: f64) -> f64 {
    if secs > 0.0 { done as f64 / secs } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_stage_shows_mib_and_mib_per_second() {
        let t0 = Instant::now();
        let mut s = Stage::new(200 << 20, Unit::Bytes, t0);
        s.advance(50 << 20);
        let text = s.detail(t0 + Duration::from_secs(2));
        assert_eq!(text, "50.0 MiB/200.0 MiB  25.0 MiB/s · eta 6s");
    }

    #[test]
    fn a_row_stage_shows_rows_per_second() {
        let t0 = Instant::now();
        let mut s = Stage::new(2_000_000, Unit::Rows, t0);
        s.advance(500_000);
        let text = s.detail(t0 + Duration::from_secs(1));
        assert_eq!(text, "500,000/2,000,000 rows  500k rows/s · eta 3s");
    }

    #[test]
    fn the_first_bucket_shows_its_phase_and_the_phase_eta() {
        let t0 = Instant::now();
        let mut s = Stage::new(2, Unit::Buckets, t0);
        s.phase("ECDH: masking own items", 1_000_000, t0);
        s.phase_advance(250_000);
        let now = t0 + Duration::from_secs(5);
        assert_eq!(s.fraction(), None);
        assert_eq!(
            s.detail(now),
            "0/2 buckets · ECDH: masking own items 250,000/1,000,000  50.0k items/s \
             · phase eta 15s"
        );
    }

    #[test]
    fn later_buckets_count_by_items_through_their_phases() {
        let t0 = Instant::now();
        let mut s = Stage::new(4, Unit::Buckets, t0);
        // Bucket 1: two phases of 1,000 items each, 10 s.
        s.phase("a", 1_000, t0);
        s.phase_advance(1_000);
        s.phase("b", 1_000, t0);
        s.phase_advance(1_000);
        s.advance(1);
        assert_eq!(s.fraction(), Some(0.25));
        // Bucket 2, half way through its items at 15 s: 1.5 of 4 buckets.
        let t1 = t0 + Duration::from_secs(10);
        s.phase("a", 1_000, t1);
        s.phase_advance(1_000);
        assert_eq!(s.fraction(), Some(0.375));
        assert_eq!(
            s.eta(t0 + Duration::from_secs(15)),
            Some(Duration::from_secs(25))
        );
        // The bar never runs ahead of the bucket under way.
        s.phase("b", 5_000, t1);
        s.phase_advance(5_000);
        assert_eq!(s.fraction(), Some(0.5));
        let text = s.detail(t0 + Duration::from_secs(20));
        assert!(text.starts_with("1/4 buckets · b 5,000/5,000  "), "{text}");
        assert!(text.ends_with(" · eta 20s"), "{text}");
    }

    #[test]
    fn a_stage_without_a_total_shows_its_elapsed_time() {
        let t0 = Instant::now();
        let s = Stage::new(0, Unit::Items, t0);
        assert_eq!(s.detail(t0 + Duration::from_secs(3)), "3s");
    }
}
