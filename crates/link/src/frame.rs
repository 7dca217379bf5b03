//! Frame header encoding shared by the TCP and in-memory links.

/// Largest payload one frame may carry: 64 MiB. Protocol batches are far smaller (a 4096-point
/// batch is 128 KiB); the bound caps what a hostile length prefix can make us allocate.
pub const MAX_FRAME_LEN: usize = 64 << 20;

/// Bytes of framing before each payload: `len: u32 LE | kind: u8`.
pub(crate) const HEADER_LEN: usize = 5;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Data = 0,
    Abort = 1,
    Close = 2,
    /// "Still here": sent on a timer, consumed by the inbox (see [`crate::heartbeat`]).
    Heartbeat = 3,
}

impl Kind {
    pub(crate) fn from_byte(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Data),
            1 => Some(Kind::Abort),
            2 => Some(Kind::Close),
            3 => Some(Kind::Heartbeat),
            _ => None,
        }
    }
}

pub(crate) fn header(kind: Kind, len: usize) -> [u8; HEADER_LEN] {
    let l = (len as u32).to_le_bytes();
    [l[0], l[1], l[2], l[3], kind as u8]
}
