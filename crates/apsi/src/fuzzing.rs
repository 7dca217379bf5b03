//! Entry points for fuzz targets (feature `fuzzing`; not a stable API): every decoder of a
//! peer's message and of a stored sender DB.

use crate::error::Result;
use crate::params::ApsiParams;
use blindjoin_he::Context;

/// [`crate::wire::decode_params`].
///
/// # Errors
/// Whatever the decoder refuses.
pub fn params(msg: &[u8]) -> Result<(ApsiParams, usize, usize)> {
    crate::wire::decode_params(msg)
}

/// [`crate::wire::decode_oprf_query`] with `max` points.
///
/// # Errors
/// Whatever the decoder refuses.
pub fn oprf_query(msg: &[u8], max: usize) -> Result<Vec<u8>> {
    crate::wire::decode_oprf_query(msg, max)
}

/// [`crate::wire::decode_oprf_reply`].
///
/// # Errors
/// Whatever the decoder refuses.
pub fn oprf_reply(msg: &[u8], n: usize) -> Result<Vec<u8>> {
    crate::wire::decode_oprf_reply(msg, n)
}

/// [`crate::wire::decode_query_head`] then [`crate::wire::decode_query_ct`] on `ct`.
///
/// # Errors
/// Whatever the decoders refuse.
pub fn query(ctx: &Context, head: &[u8], ct: &[u8], want: usize) -> Result<()> {
    crate::wire::decode_query_head(ctx, head, want)?;
    crate::wire::decode_query_ct(ctx, ct)?;
    Ok(())
}

/// [`crate::wire::decode_result_head`] then [`crate::wire::decode_result`].
///
/// # Errors
/// Whatever the decoders refuse.
pub fn result(ctx: &Context, head: &[u8], msg: &[u8], indices: usize, parts: usize) -> Result<()> {
    crate::wire::decode_result_head(head)?;
    crate::wire::decode_result(ctx, msg, indices, parts)?;
    Ok(())
}

/// [`crate::SenderDb::from_bytes`].
///
/// # Errors
/// Whatever the loader refuses.
pub fn sender_db(bytes: &[u8]) -> Result<()> {
    crate::SenderDb::from_bytes(bytes).map(|_| ())
}
