//! Numbers as a person reads them on a progress line: bytes in binary units (MiB), counts with
//! thousands separators, rates with an SI suffix (1.25M rows/s), durations as 2m05s.

use std::time::Duration;

/// `n` bytes in binary units, one decimal above a KiB: "512 B", "118.3 MiB".
pub(crate) fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if !n.is_finite() || n < 1024.0 {
        return format!("{:.0} B", n.max(0.0));
    }
    let mut v = n / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// A byte rate: "118.3 MiB/s".
pub(crate) fn bytes_rate(per_sec: f64) -> String {
    format!("{}/s", bytes(per_sec))
}

/// `n` with thousands separators: "1,048,576".
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate of `unit` per second with three significant digits and an SI suffix:
/// "0.5 rows/s", "812 items/s", "51.2k items/s", "1.25M rows/s".
pub(crate) fn count_rate(per_sec: f64, unit: &str) -> String {
    let v = if per_sec.is_finite() {
        per_sec.max(0.0)
    } else {
        0.0
    };
    let (scaled, suffix) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    // Three significant digits with a suffix; without one, whole numbers from 10 up.
    let decimals = if scaled >= 100.0 || (suffix.is_empty() && scaled >= 10.0) {
        0
    } else if scaled >= 10.0 || suffix.is_empty() {
        1
    } else {
        2
    };
    let number = format!("{scaled:.decimals$}");
    format!("{number}{suffix} {unit}/s")
}

/// A duration rounded to the second: "7s", "2m05s", "1h02m" (minutes dropped past a day's
/// worth of hours would be noise, so hours stay hours).
pub(crate) fn duration(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The time left when `fraction` (0..=1) of the work took `elapsed`, assuming the rest goes at
/// the same rate; `None` before there is anything to go on (nothing done, or under 0.1 s).
pub(crate) fn eta(elapsed: Duration, fraction: f64) -> Option<Duration> {
    if !fraction.is_finite() || fraction <= 0.0 || elapsed < Duration::from_millis(100) {
        return None;
    }
    let left = elapsed.as_secs_f64() * (1.0 - fraction.min(1.0)) / fraction;
    Some(Duration::from_secs_f64(left))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_in_binary_units() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1023.0), "1023 B");
        assert_eq!(bytes(1024.0), "1.0 KiB");
        assert_eq!(bytes(124_881_951.936_2), "119.1 MiB");
        assert_eq!(bytes(3.5 * 1024.0 * 1024.0 * 1024.0), "3.5 GiB");
        assert_eq!(bytes(f64::NAN), "0 B");
        assert_eq!(bytes_rate(124_881_951.936_2), "119.1 MiB/s");
    }

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_048_576), "1,048,576");
        assert_eq!(count(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn rates_have_three_digits_and_a_suffix() {
        assert_eq!(count_rate(0.0486, "buckets"), "0.0 buckets/s");
        assert_eq!(count_rate(0.5, "rows"), "0.5 rows/s");
        assert_eq!(count_rate(812.4, "items"), "812 items/s");
        assert_eq!(count_rate(51_234.0, "items"), "51.2k items/s");
        assert_eq!(count_rate(1_250_000.0, "rows"), "1.25M rows/s");
        assert_eq!(count_rate(124_881_951.936_2, "rows"), "125M rows/s");
        assert_eq!(count_rate(2.5e9, "items"), "2.50G items/s");
        assert_eq!(count_rate(f64::INFINITY, "rows"), "0.0 rows/s");
    }

    #[test]
    fn durations_read_as_minutes_and_hours() {
        assert_eq!(duration(Duration::from_millis(400)), "0s");
        assert_eq!(duration(Duration::from_millis(6_600)), "7s");
        assert_eq!(duration(Duration::from_secs(125)), "2m05s");
        assert_eq!(duration(Duration::from_secs(3_720)), "1h02m");
        assert_eq!(duration(Duration::from_secs(50 * 3600)), "50h00m");
    }

    #[test]
    fn eta_is_the_rest_at_the_rate_so_far() {
        // A quarter in 10 s: three quarters take 30 s more.
        assert_eq!(
            eta(Duration::from_secs(10), 0.25),
            Some(Duration::from_secs(30))
        );
        assert_eq!(eta(Duration::from_secs(10), 1.0), Some(Duration::ZERO));
        assert_eq!(eta(Duration::from_secs(10), 0.0), None);
        assert_eq!(eta(Duration::from_millis(50), 0.5), None);
        assert_eq!(eta(Duration::from_secs(10), f64::NAN), None);
    }
}
