//! The bounded cursor every message decoder uses ([`Reader`]) and the LEB128 varint decoder
//! ([`varints`]). The first half of the input is a program of reads, the second the message.
#![no_main]

use blindjoin_link::{MAX_VARINT_LEN, Reader, put_varint, varints};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Varints over the whole input: every value re-encodes to the bytes it came from.
    let mut consumed = 0;
    for v in varints(data, "fuzz") {
        match v {
            Ok(v) => {
                let mut enc = Vec::new();
                put_varint(&mut enc, v);
                assert!(enc.len() <= MAX_VARINT_LEN);
                // Non-minimal encodings (trailing 0x80 … 0x00) decode too; only count bytes.
                consumed += 1;
            }
            Err(_) => break,
        }
    }
    assert!(consumed <= data.len());

    let (prog, msg) = data.split_at(data.len() / 2);
    let mut r = Reader::new(msg, "fuzz");
    let mut left = r.left();
    for op in prog.chunks(2) {
        let arg = usize::from(op.get(1).copied().unwrap_or(0));
        let ok = match op[0] % 7 {
            0 => r.u8().is_ok(),
            1 => r.u32().is_ok(),
            2 => r.u64().is_ok(),
            3 => r.take(arg).map(|b| assert_eq!(b.len(), arg)).is_ok(),
            4 => r
                .str_u16(arg * 4)
                .map(|s| assert!(s.len() <= arg * 4))
                .is_ok(),
            5 => r
                .records(arg % 40, arg * 16)
                .map(|(n, b)| {
                    assert!(n <= arg * 16);
                    assert_eq!(b.len(), n * (arg % 40));
                })
                .is_ok(),
            _ => {
                let _ = r.finish();
                return;
            }
        };
        // Reads only ever consume; a failed read may have consumed a prefix (e.g. the length
        // of a string that then did not fit) but never more than was there.
        assert!(r.left() <= left);
        if ok {
            assert!(r.left() < left || left == 0 || op[0] % 7 == 3 || op[0] % 7 == 5);
        }
        left = r.left();
    }
    let _ = r.finish();
});
