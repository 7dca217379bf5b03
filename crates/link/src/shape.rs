//! A simulated wide-area link for benchmarks: `blindjoin bench --bandwidth 100mbit --latency 10ms`.
//!
//! Each party shapes what it *receives*: its reader thread hands a frame to `recv` only when a
//! FIFO pipe of the given bandwidth and one-way latency would have delivered it. With frame `i`
//! of `b_i` bytes read off the (fast, loopback) socket at `a_i`:
//!
//! `e_i = max(a_i, e_{i−1}) + 8·b_i / bandwidth` (the pipe finishes sending it), and the frame is
//! delivered at `e_i + latency`.
//!
//! Two stages carry that out. The reader thread waits until `e_i` before it reads the next
//! frame: while it waits, the kernel's socket buffers fill and the sender blocks, as behind a
//! real link's bottleneck. The latency is added by a second thread, the [`delay_line`], which
//! hands each frame on at `e_i + latency` while the reader goes on reading the frames behind
//! it. One stage would not do: a reader that also slept the latency before reading the next
//! frame would make `a_{i+1} ≥ e_i + latency`, so every frame of a burst would pay the latency
//! again (an APSI response of 100 frames: 1 s more at 10 ms). Frames in the delay line stay
//! charged to the reader's budget (see [`crate::budget`]) until `recv` takes them, so the line
//! is bounded like the inbox.
//!
//! Both directions are shaped (each party shapes its own receive side), so a round trip
//! costs twice the latency — the same as `tc qdisc add dev lo root netem delay 10ms rate
//! 100mbit` on loopback, which `docs/performance.md` (Reproduce) shows how to set up for a
//! kernel-level check.

use std::sync::mpsc::{SendError, Sender, channel};
use std::time::{Duration, Instant};

/// Bandwidth and one-way latency of a simulated link.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkShape {
    /// Bits per second (`0` = unlimited).
    pub bits_per_second: u64,
    /// One-way delay added to every frame.
    pub latency: Duration,
}

impl LinkShape {
    /// Parses `tc`-style values: bandwidth `100mbit`, `1gbit`, `500kbit`, `1000000` (bits/s);
    /// latency `10ms`, `250us`, `1s`. `None` for both gives `None` (no shaping).
    ///
    /// # Errors
    /// A value that does not parse, with what was expected.
    pub fn parse(bandwidth: Option<&str>, latency: Option<&str>) -> Result<Option<Self>, String> {
        if bandwidth.is_none() && latency.is_none() {
            return Ok(None);
        }
        let bits_per_second = match bandwidth {
            None => 0,
            Some(b) => parse_bandwidth(b)?,
        };
        let latency = match latency {
            None => Duration::ZERO,
            Some(l) => parse_latency(l)?,
        };
        Ok(Some(LinkShape {
            bits_per_second,
            latency,
        }))
    }

    /// The `tc`-style text of this shape, for passing it on as flags.
    pub fn to_flags(&self) -> (String, String) {
        (
            format!("{}bit", self.bits_per_second),
            format!("{}us", self.latency.as_micros()),
        )
    }
}

fn split_unit(s: &str) -> (&str, String) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..at], s[at..].trim().to_ascii_lowercase())
}

fn parse_bandwidth(s: &str) -> Result<u64, String> {
    let (num, unit) = split_unit(s);
    let scale = match unit.as_str() {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return Err(format!("bandwidth {s:?}: use e.g. 100mbit, 1gbit, 500kbit")),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bandwidth {s:?}: not a number"))?;
    let bits = v * scale;
    if !(1.0..1e15).contains(&bits) {
        return Err(format!("bandwidth {s:?}: out of range"));
    }
    Ok(bits as u64)
}

fn parse_latency(s: &str) -> Result<Duration, String> {
    let (num, unit) = split_unit(s);
    let scale = match unit.as_str() {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("latency {s:?}: use e.g. 10ms, 250us, 1s")),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("latency {s:?}: not a number"))?;
    let secs = v * scale;
    if !(0.0..=60.0).contains(&secs) {
        return Err(format!("latency {s:?}: between 0 and 60 s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The pipe's state on one receive side.
pub(crate) struct Shaper {
    shape: LinkShape,
    /// When the pipe finished sending the previous frame.
    wire_free: Option<Instant>,
}

impl Shaper {
    pub(crate) fn new(shape: LinkShape) -> Self {
        Self {
            shape,
            wire_free: None,
        }
    }

    /// `(e, e + latency)` for a frame of `bytes` that came off the socket at `arrived`: when the
    /// pipe has finished sending it, and when it is delivered.
    pub(crate) fn stamp(&mut self, arrived: Instant, bytes: usize) -> (Instant, Instant) {
        let tx = if self.shape.bits_per_second == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(bytes as f64 * 8.0 / self.shape.bits_per_second as f64)
        };
        let start = self.wire_free.map_or(arrived, |w| w.max(arrived));
        let done = start + tx;
        self.wire_free = Some(done);
        (done, done + self.shape.latency)
    }

    /// When a frame of `bytes` that came off the socket at `arrived` is delivered.
    #[cfg(test)]
    pub(crate) fn delivery(&mut self, arrived: Instant, bytes: usize) -> Instant {
        self.stamp(arrived, bytes).1
    }
}

/// Sleeps until `t` (at once if it has passed).
pub(crate) fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// The pipe's latency stage: a thread named `name` that passes each `(due, item)` sent into the
/// returned sender on to `out` at `due`, in the order sent. An item due earlier than the one
/// ahead of it (an error the reader reports at once) waits for that one, so nothing overtakes
/// data still in the pipe, and `out` closes only after the line has drained. Once `out` is
/// gone, every item left is handed to `undelivered` (to release what it holds) and the thread
/// ends; the sender side then sees the line closed.
pub(crate) fn delay_line<T: Send + 'static>(
    name: String,
    out: Sender<T>,
    mut undelivered: impl FnMut(T) + Send + 'static,
) -> std::io::Result<Sender<(Instant, T)>> {
    let (line, rx) = channel::<(Instant, T)>();
    std::thread::Builder::new().name(name).spawn(move || {
        while let Ok((due, item)) = rx.recv() {
            sleep_until(due);
            if let Err(SendError(item)) = out.send(item) {
                undelivered(item);
                while let Ok((_, item)) = rx.try_recv() {
                    undelivered(item);
                }
                return;
            }
        }
    })?;
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tc_style_values() {
        let s = LinkShape::parse(Some("100mbit"), Some("10ms"))
            .unwrap()
            .unwrap();
        assert_eq!(s.bits_per_second, 100_000_000);
        assert_eq!(s.latency, Duration::from_millis(10));
        assert_eq!(
            LinkShape::parse(Some("1.5Gbit"), None).unwrap().unwrap(),
            LinkShape {
                bits_per_second: 1_500_000_000,
                latency: Duration::ZERO
            }
        );
        assert_eq!(
            LinkShape::parse(None, Some("250us"))
                .unwrap()
                .unwrap()
                .latency,
            Duration::from_micros(250)
        );
        assert_eq!(LinkShape::parse(None, None).unwrap(), None);
        for bad in ["fast", "100mb", "-1mbit", "0bit"] {
            assert!(LinkShape::parse(Some(bad), None).is_err(), "{bad}");
        }
        assert!(LinkShape::parse(None, Some("10")).is_err());
        assert!(LinkShape::parse(None, Some("2h")).is_err());
        let (b, l) = s.to_flags();
        assert_eq!(LinkShape::parse(Some(&b), Some(&l)).unwrap(), Some(s));
    }

    #[test]
    fn the_pipe_adds_transmission_time_and_latency_in_order() {
        let shape = LinkShape {
            bits_per_second: 8_000_000, // 1 MB/s
            latency: Duration::from_millis(10),
        };
        let mut p = Shaper::new(shape);
        let t0 = Instant::now();
        // 1 MB takes 1 s on the wire, then 10 ms of latency.
        assert_eq!(p.delivery(t0, 1_000_000), t0 + Duration::from_millis(1010));
        // The next frame, already there, queues behind it.
        assert_eq!(p.delivery(t0, 1000), t0 + Duration::from_millis(1011));
        // A frame that comes much later finds the pipe idle.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(p.delivery(later, 0), later + Duration::from_millis(10));
    }
}
