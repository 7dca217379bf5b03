//! [`ProtocolChoice`]: which protocol runs, with the parameters both parties must share. It is
//! what a plan carries, what the [`crate::Hello`] announces (as typed fields), and what
//! [`crate::run_psi`] dispatches on — the one place a choice becomes an implementation.

use crate::rr22::Rr22Mode;
use crate::{Curve, Protocol, ProtocolError};
use std::fmt;

/// A two-party PSI protocol and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum ProtocolChoice {
    /// ECDH-PSI on a curve.
    Ecdh {
        /// The curve both parties blind with.
        curve: Curve,
    },
    /// KKRT16.
    Kkrt,
    /// RR22 in one of its modes.
    Rr22 {
        /// Fast, low-communication or malicious.
        mode: Rr22Mode,
    },
}

impl ProtocolChoice {
    /// The protocol, without its parameters.
    pub fn protocol(self) -> Protocol {
        match self {
            ProtocolChoice::Ecdh { .. } => Protocol::Ecdh,
            ProtocolChoice::Kkrt => Protocol::Kkrt,
            ProtocolChoice::Rr22 { .. } => Protocol::Rr22,
        }
    }

    /// The curve, for ECDH.
    pub fn curve(self) -> Option<Curve> {
        match self {
            ProtocolChoice::Ecdh { curve } => Some(curve),
            _ => None,
        }
    }

    /// The mode, for protocols that have several (RR22).
    pub fn mode(self) -> Option<&'static str> {
        match self {
            ProtocolChoice::Rr22 { mode } => Some(mode.variant()),
            _ => None,
        }
    }

    /// The choice for `protocol`, with the curve it needs (ECDH) and the RR22 mode; the other
    /// protocols ignore `curve` and `mode`.
    ///
    /// # Errors
    /// ECDH without a curve.
    pub fn new(
        protocol: Protocol,
        curve: Option<Curve>,
        mode: Rr22Mode,
    ) -> Result<Self, ProtocolError> {
        Ok(match protocol {
            Protocol::Ecdh => ProtocolChoice::Ecdh {
                curve: curve
                    .ok_or_else(|| ProtocolError::Config("PROTOCOL_ECDH needs a curve".into()))?,
            },
            Protocol::Kkrt => ProtocolChoice::Kkrt,
            Protocol::Rr22 => ProtocolChoice::Rr22 { mode },
        })
    }

    /// `(protocol code, parameter code)` on the wire.
    pub(crate) fn wire_codes(self) -> (u8, u8) {
        match self {
            ProtocolChoice::Ecdh { curve } => (1, curve_code(curve)),
            ProtocolChoice::Kkrt => (2, 0),
            ProtocolChoice::Rr22 { mode } => (3, mode_code(mode)),
        }
    }

    /// The choice [`Self::wire_codes`] encoded; `None` for codes this build does not know.
    pub(crate) fn from_wire_codes(protocol: u8, param: u8) -> Option<Self> {
        match (protocol, param) {
            (1, c) => Curve::ALL
                .iter()
                .copied()
                .find(|&curve| curve_code(curve) == c)
                .map(|curve| ProtocolChoice::Ecdh { curve }),
            (2, 0) => Some(ProtocolChoice::Kkrt),
            (3, m) => [Rr22Mode::Fast, Rr22Mode::LowComm, Rr22Mode::Malicious]
                .into_iter()
                .find(|&mode| mode_code(mode) == m)
                .map(|mode| ProtocolChoice::Rr22 { mode }),
            _ => None,
        }
    }
}

/// A curve's wire code: its place in [`Curve::ALL`], from 1.
fn curve_code(curve: Curve) -> u8 {
    Curve::ALL
        .iter()
        .position(|&c| c == curve)
        .map_or(0, |i| i as u8 + 1)
}

fn mode_code(mode: Rr22Mode) -> u8 {
    match mode {
        Rr22Mode::Fast => 0,
        Rr22Mode::LowComm => 1,
        Rr22Mode::Malicious => 2,
    }
}

impl fmt::Display for ProtocolChoice {
    /// SecretFlow's protocol name, with the curve or mode: `PROTOCOL_ECDH (CURVE_25519)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolChoice::Ecdh { curve } => write!(f, "{} ({curve})", Protocol::Ecdh),
            ProtocolChoice::Kkrt => write!(f, "{}", Protocol::Kkrt),
            ProtocolChoice::Rr22 { mode } => write!(f, "{} ({mode})", Protocol::Rr22),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_round_trips_through_its_wire_codes() {
        let mut all: Vec<ProtocolChoice> = Curve::ALL
            .iter()
            .map(|&curve| ProtocolChoice::Ecdh { curve })
            .collect();
        all.push(ProtocolChoice::Kkrt);
        for mode in [Rr22Mode::Fast, Rr22Mode::LowComm, Rr22Mode::Malicious] {
            all.push(ProtocolChoice::Rr22 { mode });
        }
        let mut codes = Vec::new();
        for c in all {
            let (p, q) = c.wire_codes();
            assert_eq!(ProtocolChoice::from_wire_codes(p, q), Some(c));
            codes.push((p, q));
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Curve::ALL.len() + 4);
        assert_eq!(ProtocolChoice::from_wire_codes(1, 0), None);
        assert_eq!(ProtocolChoice::from_wire_codes(2, 1), None);
        assert_eq!(ProtocolChoice::from_wire_codes(9, 0), None);
    }
}
