//! The bucket-count exchange of a bucketed run (`blindjoin_data::bucket`, `exchange_count`):
//! before each bucket the parties swap how many unique keys they hold in it, and the peer's
//! count must fit the rows it announced and what a uniform hash can put in one bucket. This
//! party sends its count honestly; the fuzz input is the peer's reply. Input: `b u8 | k u8 |
//! ours u8 | total u16 LE | before u16 LE | messages`: the peer announced `total` rows, had
//! `before` (at most `total`) in the buckets before bucket `k` (mod the bucket count), and we
//! hold `ours` keys in it; `b` picks the bucket size (2^(b mod 16)), so the run has 1 to many
//! buckets.
#![no_main]

use blindjoin_data::bucket::{bucket_count, padded_bucket_size};
use blindjoin_data::fuzzing;
use blindjoin_link::mem_pair;
use blindjoin_protocols::fuzzing::hello_encode;
use blindjoin_protocols::{Curve, Hello, ProtocolChoice, Role, handshake};
use fuzz_support::{feed, messages};
use libfuzzer_sys::fuzz_target;

/// Rows this party announced.
const OUR_ROWS: u64 = 1000;

fuzz_target!(|data: &[u8]| {
    if data.len() < 7 {
        return;
    }
    let bucket_size = 1u64 << (data[0] % 16);
    let ours = u64::from(data[2]);
    let total = u64::from(u16::from_le_bytes([data[3], data[4]]));
    let before = u64::from(u16::from_le_bytes([data[5], data[6]])).min(total);
    let Ok(buckets) = bucket_count(OUR_ROWS, total, bucket_size) else {
        return;
    };
    let k = usize::from(data[1]) % buckets;
    let ecdh = ProtocolChoice::Ecdh {
        curve: Curve::Curve25519,
    };
    let hello = |role, rows| Hello::new(ecdh, role, false, rows);
    // The peer's valid hello (the handshake agrees the row counts), then the fuzz input.
    let theirs = hello_encode(&hello(Role::Sender, total));
    let mut msgs = vec![theirs.as_slice()];
    msgs.extend(messages(&data[7..], 1 << 12));
    let (mut me, mut peer) = mem_pair();
    feed(&mut peer, &msgs);
    let Ok(hs) = handshake(&mut me, hello(Role::Receiver, OUR_ROWS)) else {
        return;
    };
    if let Ok(theirs) = fuzzing::bucket_count(&mut me, &hs, bucket_size, k, before, ours) {
        // With several buckets the peer pads each to a size fixed by its row count.
        let padded = padded_bucket_size(total, buckets).saturating_mul(buckets as u64);
        assert!(
            before + theirs <= total.max(padded),
            "more keys than the peer announced"
        );
        assert!(
            theirs <= 2 * total / buckets as u64 + 1024,
            "a bucket past the hash's bound"
        );
    }
});
