//! Progress bars on stderr (indicatif), only when stderr is a terminal.
//!
//! One bar per stage. The text after the bar ([`state::Stage::detail`]) is written at each
//! redraw from the shared state, so rates, the phase of the bucket under way and the ETA move
//! even while no unit of the stage finishes (a bucket's protocol run takes seconds to minutes).

mod state;
mod units;

use blindjoin_data::{Progress, Unit};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use state::Stage;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bar's length: it shows the stage's fraction done in thousandths.
const BAR_STEPS: u64 = 1000;
/// How often the line is redrawn when nothing is reported (the clock and rates still move).
const TICK: Duration = Duration::from_millis(200);

/// Draws one bar per stage.
pub(crate) struct Bars {
    current: Mutex<Option<ProgressBar>>,
    /// Never locked while a bar method runs: the bar's redraw locks it.
    stage: Arc<Mutex<Option<Stage>>>,
    enabled: bool,
}

impl Bars {
    pub(crate) fn new(quiet: bool) -> Bars {
        Bars {
            current: Mutex::new(None),
            stage: Arc::new(Mutex::new(None)),
            enabled: !quiet && std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn finish(&self) {
        if let Ok(mut cur) = self.current.lock()
            && let Some(bar) = cur.take()
        {
            bar.finish_and_clear();
        }
    }

    /// A bar for a stage of `total` units (a spinner without a total), its text from `stage`.
    fn bar_for(&self, name: &'static str, total: u64) -> ProgressBar {
        let shared = Arc::clone(&self.stage);
        let detail = move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
            if let Ok(s) = shared.lock()
                && let Some(s) = s.as_ref()
            {
                let _ = w.write_str(&s.detail(Instant::now()));
            }
        };
        let (bar, template) = if total == 0 {
            (ProgressBar::new_spinner(), "{spinner} {prefix} {detail}")
        } else {
            (
                ProgressBar::new(BAR_STEPS),
                "{prefix:>30} [{bar:30}] {detail}",
            )
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.with_key("detail", detail).progress_chars("=> "));
        }
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
        bar.set_prefix(name);
        bar.enable_steady_tick(TICK);
        bar
    }

    /// Applies `f` to the current stage, then moves the bar to the stage's fraction done.
    fn update(&self, f: impl FnOnce(&mut Stage)) {
        if !self.enabled {
            return;
        }
        let fraction = match self.stage.lock() {
            Ok(mut s) => match s.as_mut() {
                Some(s) => {
                    f(s);
                    s.fraction()
                }
                None => return,
            },
            Err(_) => return,
        };
        if let (Some(fraction), Ok(cur)) = (fraction, self.current.lock())
            && let Some(bar) = cur.as_ref()
        {
            bar.set_position((fraction * BAR_STEPS as f64) as u64);
        }
    }
}

impl Progress for Bars {
    fn stage(&self, name: &'static str, total: u64) {
        self.stage_in(name, total, Unit::Items);
    }

    fn stage_in(&self, name: &'static str, total: u64, unit: Unit) {
        if !self.enabled {
            return;
        }
        // The old bar goes before the state changes: its last redraw must not show the new stage.
        self.finish();
        if let Ok(mut s) = self.stage.lock() {
            *s = Some(Stage::new(total, unit, Instant::now()));
        }
        let bar = self.bar_for(name, total);
        if let Ok(mut cur) = self.current.lock() {
            *cur = Some(bar);
        }
    }

    fn advance(&self, n: u64) {
        self.update(|s| s.advance(n));
    }

    fn phase(&self, name: &'static str, total: u64) {
        self.update(|s| s.phase(name, total, Instant::now()));
    }

    fn phase_advance(&self, n: u64) {
        self.update(|s| s.phase_advance(n));
    }
}
