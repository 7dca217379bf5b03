//! SecretFlow's PSI messages from a hostile peer: the fuzz input is a `PsiDataBatchProto` (its
//! first byte picks the item width the protocol would expect: a 12-byte tail, a 32-byte point
//! or a 33-byte SEC1 point) and, in the same bytes, a peer's `psi.v2.PsiConfig` checked against
//! the wheel's, and the unbalanced PSI's uncounted batches and `IndexesProto`. None may panic;
//! an accepted batch is self-consistent.
#![no_main]

use blindjoin_protocols::secretflow::batch::Batch;
use blindjoin_protocols::secretflow::config::{self, PsiConfig};
use blindjoin_protocols::secretflow::ub;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let width = [12usize, 32, 33][usize::from(sel) % 3];
    if let Ok(b) = Batch::decode(rest, width) {
        assert_eq!(b.flatten.len(), b.item_num as usize * width);
        assert!(b.duplicates.iter().all(|&(i, _)| i < b.item_num));
        assert!(b.duplicates.windows(2).all(|w| w[0].0 < w[1].0));
    }
    if let Ok(b) = Batch::decode_uncounted(rest, width) {
        assert_eq!(b.flatten.len(), b.item_num as usize * width);
        assert!(b.duplicates.iter().all(|&(i, _)| i < b.item_num));
    }
    if let Ok(v) = ub::decode_indexes(rest, 1000, "fuzz") {
        assert!(v.len() <= 1000);
    }
    let ours = PsiConfig {
        protocol: config::PROTOCOL_ECDH,
        role: config::ROLE_RECEIVER,
        broadcast_result: true,
        curve: 1,
        ecdh_batch_size: 4096,
        kkrt_bucket_size: 1 << 20,
        rr22_bucket_size: 1 << 20,
        rr22_low_comm: false,
        join_type: 1,
        left_side: 1,
        check_hash_digest: true,
        csv_null_rep: "NULL".into(),
        recovery: false,
    };
    let _ = config::check_peer(&ours.encode(), rest, "receiver");
});
