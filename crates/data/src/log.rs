//! `debug_options.logging_level`: how much a run prints on stderr. One level per process, as
//! SecretFlow's default logger has; SecretFlow's spellings are accepted (`trace`, `debug`,
//! `info`, `warn`, `err`, `critical`, `off`, any case; also `warning` and `error`).
//!
//! What each level prints (each includes everything of the quieter ones):
//!
//! | level | on stderr |
//! |---|---|
//! | `off` | nothing (the exit code still says how the run ended) |
//! | `critical`, `err` | the error that stopped the run |
//! | `warn` | the config's and the run's warnings |
//! | `info` (default) | progress bars (on a terminal) and the one-line summary |
//! | `debug` | each stage's time as it ends (read, connect, handshake, protocol, merge, write) |
//! | `trace` | each bucket's protocol and join times too |
//!
//! `--quiet` (no progress bars, no summary) caps the level at `warn`. The JSON report on stdout
//! is the same at every level.

use std::sync::atomic::{AtomicU8, Ordering};

/// A logging level, quietest last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Every bucket's times.
    Trace = 0,
    /// Every stage's time.
    Debug = 1,
    /// Progress and the summary (the default).
    Info = 2,
    /// Warnings.
    Warn = 3,
    /// The error that stopped the run.
    Error = 4,
    /// As `Error` (SecretFlow's `critical`).
    Critical = 5,
    /// Nothing.
    Off = 6,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

impl Level {
    /// Parses SecretFlow's spellings (any case); an empty string is the default, `info`.
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "trace" => Level::Trace,
            "debug" => Level::Debug,
            "" | "info" => Level::Info,
            "warn" | "warning" => Level::Warn,
            "err" | "error" => Level::Error,
            "critical" => Level::Critical,
            "off" => Level::Off,
            _ => return None,
        })
    }

    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Trace,
            1 => Level::Debug,
            2 => Level::Info,
            3 => Level::Warn,
            4 => Level::Error,
            5 => Level::Critical,
            _ => Level::Off,
        }
    }

    /// SecretFlow's name of the level.
    pub fn name(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "err",
            Level::Critical => "critical",
            Level::Off => "off",
        }
    }
}

/// Sets the process's level.
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// The process's level.
pub fn level() -> Level {
    Level::from_u8(LEVEL.load(Ordering::Relaxed))
}

/// Whether messages of `level` are printed.
pub fn enabled(level: Level) -> bool {
    level != Level::Off && level >= self::level()
}

/// Prints `message` on stderr if `level` is enabled, tagged with the level below `info`.
pub fn emit(level: Level, message: &str) {
    if !enabled(level) {
        return;
    }
    if level < Level::Info {
        eprintln!("blindjoin: [{}] {message}", level.name());
    } else {
        eprintln!("blindjoin: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secretflow_spellings_parse_and_order_from_loudest_to_quietest() {
        let names = ["trace", "debug", "info", "warn", "err", "critical", "off"];
        let levels: Vec<Level> = names.iter().map(|n| Level::parse(n).unwrap()).collect();
        assert!(levels.windows(2).all(|w| w[0] < w[1]));
        for (n, l) in names.iter().zip(&levels) {
            assert_eq!(l.name(), *n);
            assert_eq!(Level::parse(&n.to_uppercase()), Some(*l));
        }
        assert_eq!(Level::parse(""), Some(Level::Info));
        assert_eq!(Level::parse("WARNING"), Some(Level::Warn));
        assert_eq!(Level::parse("verbose"), None);
    }

    #[test]
    fn a_level_enables_itself_and_the_quieter_ones_and_off_nothing() {
        // The level is the process's: this is the only test in the crate that changes it.
        let before = level();
        set_level(Level::Warn);
        assert!(enabled(Level::Warn) && enabled(Level::Error) && !enabled(Level::Info));
        set_level(Level::Off);
        assert!(!enabled(Level::Critical) && !enabled(Level::Off));
        set_level(Level::Trace);
        assert!(enabled(Level::Trace) && enabled(Level::Critical));
        set_level(before);
    }
}
