//! The DB file in both forms against the in-memory DB and a plaintext lookup, and every kind of
//! damaged, foreign or lying file.

use super::{DbForm, SenderDb};
use crate::error::ApsiError;
use crate::tests::{digests, expected, labels_for, paterson_stockmeyer_l3, run, small};
use blindjoin_crypto::ItemDigest;
use sha2::{Digest, Sha256};

const FORMS: [DbForm; 2] = [DbForm::Ntt, DbForm::Packed];

/// The same plaintexts, bundle by bundle.
fn assert_same_db(a: &SenderDb, b: &SenderDb) {
    assert_eq!(a.bundle_counts(), b.bundle_counts());
    assert_eq!(a.item_count(), b.item_count());
    assert_eq!(a.label_len(), b.label_len());
    assert_eq!(a.nonce_len(), b.nonce_len());
    assert_eq!(a.params().to_bytes(), b.params().to_bytes());
    for (x, y) in a.bundles.iter().flatten().zip(b.bundles.iter().flatten()) {
        assert_eq!(x.degree, y.degree);
        assert_eq!(x.labels.len(), y.labels.len());
        for (c, d) in std::iter::once(&x.matching)
            .chain(&x.labels)
            .zip(std::iter::once(&y.matching).chain(&y.labels))
        {
            assert!(c.ntt == d.ntt);
            assert!(c.plain == d.plain);
        }
    }
}

/// Saves `db` in both forms, loads each back, and checks plaintexts, answers to `q` (against
/// the in-memory DB and the plaintext lookup) and that re-saving gives the same bytes.
fn round_trip(
    db: &SenderDb,
    items: &[ItemDigest],
    labels: Option<&[Vec<u8>]>,
    q: &[ItemDigest],
) -> [usize; 2] {
    let want = expected(items, labels, db.label_len(), q);
    assert_eq!(run(db, None, q).unwrap(), want);
    FORMS.map(|form| {
        let bytes = db.to_bytes(form);
        let back = SenderDb::from_bytes(&bytes).unwrap();
        assert_same_db(db, &back);
        assert_eq!(run(&back, None, q).unwrap(), want, "{form:?}");
        assert_eq!(back.to_bytes(form).as_slice(), bytes.as_slice(), "{form:?}");
        bytes.len()
    })
}

#[test]
fn both_forms_give_the_in_memory_answers() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    // Labeled: half the queries in, one duplicated.
    let items = digests("d", 100);
    let labels = labels_for(100, 10, 9);
    let db = SenderDb::build(params.clone(), &items, Some(&labels), 10, 16).unwrap();
    let mut q = digests("d", 10);
    q.extend(digests("e", 10));
    q.push(q[0]);
    let [ntt, packed] = round_trip(&db, &items, Some(&labels), &q);
    // N = 4096, 2 data primes, t = 40961 (16 bits): 8·8·2 / 16 = 8× on the plaintexts; ntt
    // also stores the degree-0 plaintexts twice.
    assert!(ntt > 8 * packed - 8 * 1000, "{ntt} vs {packed}");
    // Unlabeled: all, none.
    let items = digests("u", 300);
    let db = SenderDb::build(params.clone(), &items, None, 0, 0).unwrap();
    round_trip(&db, &items, None, &digests("u", 300));
    round_trip(&db, &items, None, &digests("v", 30));
    // One item; no item (no bundle at all).
    let one = digests("o", 1);
    let db = SenderDb::build(params.clone(), &one, Some(&[vec![7u8; 3]]), 3, 0).unwrap();
    round_trip(&db, &one, Some(&[vec![7u8; 3]]), &digests("o", 2));
    let db = SenderDb::build(params, &[], None, 0, 0).unwrap();
    let [ntt, packed] = round_trip(&db, &[], None, &digests("o", 2));
    assert_eq!(ntt, packed);
}

/// Paterson–Stockmeyer (L = 3) keeps the plaintexts of degree 0, 4, 8, … in coefficient form
/// too: the packed form stores them once and rebuilds both.
#[test]
fn paterson_stockmeyer_plaintexts_survive_both_forms() {
    let ps = paterson_stockmeyer_l3();
    let items = digests("ps", 400);
    let labels = labels_for(400, 20, 3);
    let db = SenderDb::build(ps, &items, Some(&labels), 20, 8).unwrap();
    assert!(db.max_degree() >= 4, "{}", db.max_degree());
    let mut q = digests("ps", 12);
    q.extend(digests("pq", 4));
    round_trip(&db, &items, Some(&labels), &q);
}

/// Version 2 (the ntt form without the form byte) is still read.
#[test]
fn version_2_files_are_read() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let items = digests("w", 50);
    let labels = labels_for(50, 4, 1);
    let db = SenderDb::build(params, &items, Some(&labels), 4, 16).unwrap();
    let mut v2 = db.to_bytes(DbForm::Ntt).to_vec();
    v2.remove(10);
    v2[8..10].copy_from_slice(&2u16.to_le_bytes());
    let back = SenderDb::from_bytes(&resum(v2)).unwrap();
    assert_same_db(&db, &back);
    let q = digests("w", 5);
    assert_eq!(
        run(&back, None, &q).unwrap(),
        expected(&items, Some(&labels), 4, &q)
    );
}

/// `b` with its checksum recomputed: the checks must not rely on the checksum.
fn resum(mut b: Vec<u8>) -> Vec<u8> {
    let n = b.len() - 32;
    let sum = Sha256::digest(&b[..n]);
    b[n..].copy_from_slice(&sum);
    b
}

fn db_err(b: Vec<u8>, what: &str) {
    match SenderDb::from_bytes(&resum(b)) {
        Err(ApsiError::Db(m)) => assert!(m.contains(what), "{what}: {m}"),
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("a DB with {what} was accepted"),
    }
}

#[test]
fn damaged_foreign_and_lying_files_are_refused() {
    let params = small(16, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let items = digests("d", 100);
    let labels = labels_for(100, 10, 9);
    let db = SenderDb::build(params.clone(), &items, Some(&labels), 10, 16).unwrap();
    let is_db_err = |b: &[u8]| matches!(SenderDb::from_bytes(b), Err(ApsiError::Db(_)));
    assert!(is_db_err(b"not a db"));
    assert!(is_db_err(&[]));
    for form in FORMS {
        let bytes = db.to_bytes(form);
        // A flipped bit anywhere (header, plaintexts, checksum), a short file.
        for at in [20, 100, bytes.len() / 2, bytes.len() - 40, bytes.len() - 5] {
            let mut bad = bytes.to_vec();
            bad[at] ^= 0x40;
            assert!(is_db_err(&bad), "{form:?} at {at}");
        }
        for cut in [1, 32, 33, bytes.len() / 2, bytes.len() - 40] {
            assert!(is_db_err(&bytes[..bytes.len() - cut]), "{form:?} cut {cut}");
        }
        // Offsets: magic 8, version 2, form 1, params length 4, params, label_len 4, nonce 1,
        // seed 32, items 8, index count 4, then index 0's bundle count, its first bundle's
        // degree and the first plaintext.
        let plen = u32::from_le_bytes(bytes[11..15].try_into().unwrap()) as usize;
        let nidx_at = 15 + plen + 4 + 1 + 32 + 8;
        let nb_at = nidx_at + 4;
        let pt_at = nb_at + 8;
        let edit = |at: usize, with: &[u8]| {
            let mut b = bytes.to_vec();
            b[at..at + with.len()].copy_from_slice(with);
            b
        };
        let mut foreign = bytes.to_vec();
        foreign[0] = b'C';
        db_err(foreign, "magic");
        db_err(edit(8, &1u16.to_le_bytes()), "re-run setup");
        db_err(edit(8, &4u16.to_le_bytes()), "re-run setup");
        db_err(edit(10, &[2]), "plaintext form 2");
        db_err(edit(10, &[0xFF]), "plaintext form 255");
        db_err(edit(nidx_at, &3u32.to_le_bytes()), "bundle indices");
        db_err(edit(nb_at, &u32::MAX.to_le_bytes()), "claims");
        db_err(edit(nb_at, &1_000u32.to_le_bytes()), "claims");
        db_err(edit(nb_at + 4, &100_000u32.to_le_bytes()), "degree");
        db_err(edit(nb_at + 4, &0u32.to_le_bytes()), "degree");
        // The other form's flag: the sizes no longer add up.
        let other = if form == DbForm::Ntt { 1 } else { 0 };
        assert!(is_db_err(&resum(edit(10, &[other]))), "{form:?}");
        match form {
            DbForm::Ntt => {
                db_err(edit(pt_at, &u64::MAX.to_le_bytes()), "not below its prime");
                // The degree-0 plaintext in coefficient form follows the matching
                // polynomial's NTT-form ones (N = 4096, 2 primes).
                let degree = u32::from_le_bytes(bytes[nb_at + 4..nb_at + 8].try_into().unwrap());
                let plain_at = pt_at + (degree as usize + 1) * 8 * 4096 * 2;
                db_err(edit(plain_at, &40961u64.to_le_bytes()), "not below t");
                db_err(edit(plain_at + 8, &u64::MAX.to_le_bytes()), "not below t");
            }
            DbForm::Packed => {
                // 16 bits per coefficient at t = 40961: 0xFFFF and t itself are refused.
                db_err(edit(pt_at, &[0xFF, 0xFF]), "not below t");
                db_err(edit(pt_at + 2, &40961u16.to_le_bytes()), "not below t");
                // t − 1 is a valid coefficient: only the checksum tells the damage.
                let mut b = edit(pt_at, &40960u16.to_le_bytes());
                assert!(SenderDb::from_bytes(&resum(b.clone())).is_ok());
                let n = b.len();
                b[n - 1] ^= 1;
                assert!(is_db_err(&b));
            }
        }
        let mut long = bytes.to_vec();
        long.splice(long.len() - 32..long.len() - 32, [0u8; 8]);
        db_err(long, "trailing");
    }
    // Duplicate items and bad labels are the caller's error.
    let dup = vec![items[0], items[0]];
    assert!(matches!(
        SenderDb::build(params.clone(), &dup, None, 0, 0),
        Err(ApsiError::Input(_))
    ));
    assert!(matches!(
        SenderDb::build(params, &items[..1], Some(&[vec![0u8; 11]]), 10, 16),
        Err(ApsiError::Input(_))
    ));
}
