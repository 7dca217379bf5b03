//! Progress bars on stderr (indicatif), only when stderr is a terminal.

use blindjoin_data::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;

/// Draws one bar per stage.
pub(crate) struct Bars {
    current: Mutex<Option<ProgressBar>>,
    enabled: bool,
}

impl Bars {
    pub(crate) fn new(quiet: bool) -> Bars {
        Bars {
            current: Mutex::new(None),
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
}

impl Progress for Bars {
    fn stage(&self, name: &'static str, total: u64) {
        if !self.enabled {
            return;
        }
        let bar = if total == 0 {
            ProgressBar::new_spinner()
        } else {
            let b = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg:>26} [{bar:30}] {human_pos}/{human_len} {per_sec} eta {eta}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
        bar.set_message(name);
        if let Ok(mut cur) = self.current.lock()
            && let Some(old) = cur.replace(bar)
        {
            old.finish_and_clear();
        }
    }

    fn advance(&self, n: u64) {
        if let Ok(cur) = self.current.lock()
            && let Some(bar) = cur.as_ref()
        {
            bar.inc(n);
        }
    }
}
