//! Labeled PSI (`blindjoin-apsi`): every decoder of a peer's message and of a stored sender DB
//! on arbitrary bytes. The first input byte picks the decoder; for the two-part messages the
//! next two bytes say where the first part ends. Ciphertexts are decoded under one fixed
//! parameter set (N = 4096, t = 40961, [40, 32, 32], SecretFlow's `1M-1024-cmp`).
#![no_main]

use blindjoin_apsi::fuzzing;
use blindjoin_he::{Context, Parameters, PlainModulus};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn context() -> Option<&'static Context> {
    static CTX: OnceLock<Option<Context>> = OnceLock::new();
    CTX.get_or_init(|| {
        let params = Parameters::new(4096, PlainModulus::Value(40961), &[40, 32, 32]).ok()?;
        Context::new(&params).ok()
    })
    .as_ref()
}

/// `data` cut in two where its first two bytes (little endian) say.
fn two_parts(data: &[u8]) -> (&[u8], &[u8]) {
    match data {
        [a, b, rest @ ..] => {
            rest.split_at(usize::from(u16::from_le_bytes([*a, *b])).min(rest.len()))
        }
        _ => (&[], &[]),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, msg)) = data.split_first() else {
        return;
    };
    let Some(ctx) = context() else {
        return;
    };
    let n = usize::from(pick >> 3);
    let _ = match pick % 6 {
        0 => fuzzing::params(msg).map(|_| ()),
        1 => fuzzing::oprf_query(msg, 4096).map(|_| ()),
        2 => fuzzing::oprf_reply(msg, n).map(|_| ()),
        3 => {
            let (head, ct) = two_parts(msg);
            fuzzing::query(ctx, head, ct, n)
        }
        4 => {
            let (head, body) = two_parts(msg);
            fuzzing::result(ctx, head, body, n + 1, usize::from(pick >> 6) + 1)
        }
        _ => fuzzing::sender_db(msg),
    };
});
