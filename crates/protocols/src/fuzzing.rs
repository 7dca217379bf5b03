//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a stable API): the
//! decoders that are private to this crate.

use crate::{Link, ProtocolError};

/// Decodes `total` result positions below `n` from `bytes` in `format` (what the sender does
/// with the receiver's broadcast after [`blindjoin_link::recv_bulk`]).
///
/// # Errors
/// Whatever the decoder refuses.
pub fn positions_decode(
    format: u8,
    bytes: &[u8],
    total: usize,
    n: usize,
) -> Result<Vec<usize>, ProtocolError> {
    crate::positions::decode(format, bytes, total, n)
}

/// Receives the result positions of a party with `n` items from `link` (head, then the bulk
/// messages), as the sender does when the result is broadcast.
///
/// # Errors
/// Whatever the receive refuses.
pub fn positions_receive(link: &mut dyn Link, n: usize) -> Result<Vec<usize>, ProtocolError> {
    crate::positions::receive(link, n)
}

/// The wire bytes of `hello`, as [`crate::handshake`] sends them (so a fuzz target can play a
/// peer that gets past the handshake).
pub fn hello_encode(hello: &crate::Hello) -> Vec<u8> {
    blindjoin_link::wire::WireMessage::encode(hello)
}
