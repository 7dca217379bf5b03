//! The receiver: OPRF of its items over the link, a cuckoo table of the hashed items
//! (table_size bins, hash_func_count functions, one location each), per bundle index the
//! encrypted source powers y^p of the bins' felts (seeded ciphertexts, half size), the
//! relinearization keys once; then it decrypts each bundle's result, finds the bins whose
//! felts all decrypt to zero (a match needs every felt of the item to be a root), and decodes
//! and decrypts their labels.
//!
//! Duplicate query items are queried once and answered at every index they occur at. Empty
//! bins hold the value 0 (no information: a result for an empty bin is ignored).
//!
//! **Cuckoo hashing** (Pagh–Rodler): an item goes to the first of its locations that is free,
//! else evicts the occupant of one (a pseudorandom choice) which then moves on; after
//! [`MAX_EVICTIONS`] moves per item the query fails with [`ApsiError::Cuckoo`] (no stash, as
//! APSI: the receiver learns that it must split its query; nothing is revealed to the sender).

use crate::error::{ApsiError, Result, peer};
use crate::item::{self, HashedItem, LabelKey};
use crate::params::ApsiParams;
use crate::powers::PowersDag;
use crate::sender_db::OPRF_CURVE;
use crate::wire;
use blindjoin_crypto::ItemDigest;
use blindjoin_crypto::oprf::{OprfScalar, POINT_LEN, tag};
use blindjoin_he::modarith::Modulus;
use blindjoin_he::{BatchEncoder, RelinKeys, SecretKey, cipher};
use blindjoin_link::Link;
use rayon::prelude::*;

/// Evictions allowed per item before the cuckoo insertion gives up.
pub const MAX_EVICTIONS: usize = 500;

/// Most query ciphertexts (bundle indices × query powers) a receiver encrypts and sends under
/// parameters it adopts from the sender (`params = None` in [`query`]): 1024. The sender picks
/// them, so without a cap a hostile sender could make the receiver encrypt and upload up to
/// 2^18 indices × 2^14 powers. Every APSI preset needs at most 72 (1M-4096-cmp: 8 indices × 9
/// powers; `crates/he/tests/data`), so 1024 is 14× the largest; at N = 8192 with three primes a
/// seeded ciphertext is about 100 KB and takes a few ms to encrypt, so the cap bounds the
/// receiver's work to about 100 MB and seconds. A receiver that means to use larger parameters
/// names them itself (its `params_file`), and then no cap applies.
pub const MAX_ADOPTED_QUERY_CTS: usize = 1024;

/// Places each item in one of its locations; `table[bin] = Some(item index)`.
///
/// # Errors
/// [`ApsiError::Cuckoo`] if some item cannot be placed.
pub fn cuckoo(items: &[HashedItem], h: usize, table_size: usize) -> Result<Vec<Option<u32>>> {
    let fail = || ApsiError::Cuckoo {
        items: items.len(),
        table_size,
    };
    if items.len() > table_size {
        return Err(fail());
    }
    let mut table: Vec<Option<u32>> = vec![None; table_size];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for start in 0..items.len() {
        let mut cur = start as u32;
        let mut placed = false;
        for _ in 0..=MAX_EVICTIONS {
            let locs: Vec<usize> = (0..h)
                .map(|i| item::location(&items[cur as usize], i, table_size))
                .collect();
            if let Some(&l) = locs.iter().find(|&&l| table[l].is_none()) {
                table[l] = Some(cur);
                placed = true;
                break;
            }
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let l = locs[(state % h as u64) as usize];
            let out = table[l].replace(cur);
            match out {
                Some(o) => cur = o,
                None => {
                    placed = true;
                    break;
                }
            }
        }
        if !placed {
            return Err(fail());
        }
    }
    Ok(table)
}

/// Queries `items` against the sender on `link`. With `params = None` the sender's
/// parameters are taken; otherwise they must be the sender's. Returns, per query index, `None`
/// when the item is not in the sender's DB, else its label (empty in unlabeled mode; labels are
/// label_len bytes, shorter ones zero-padded by the sender).
///
/// # Errors
/// Link failures, [`ApsiError::ParamsMismatch`], [`ApsiError::Cuckoo`],
/// [`ApsiError::PeerMisbehaved`] for anything malformed from the sender.
pub fn query(
    link: &mut dyn Link,
    params: Option<&ApsiParams>,
    items: &[ItemDigest],
) -> Result<Vec<Option<Vec<u8>>>> {
    let (theirs, label_len, nonce_len) = wire::decode_params(&link.recv()?)?;
    if let Some(ours) = params
        && ours.to_bytes() != theirs.to_bytes()
    {
        return Err(ApsiError::ParamsMismatch(format!(
            "ours: N={} t={} table_size={} max_items_per_bin={} felts_per_item={}; theirs: N={} \
             t={} table_size={} max_items_per_bin={} felts_per_item={}",
            ours.degree(),
            ours.plain_modulus(),
            ours.table.table_size,
            ours.table.max_items_per_bin,
            ours.felts_per_item,
            theirs.degree(),
            theirs.plain_modulus(),
            theirs.table.table_size,
            theirs.table.max_items_per_bin,
            theirs.felts_per_item
        )));
    }
    if params.is_none() {
        let (bundle_indices, powers) = (theirs.bundle_idx_count(), theirs.query.query_powers.len());
        let ciphertexts = bundle_indices.saturating_mul(powers);
        if ciphertexts > MAX_ADOPTED_QUERY_CTS {
            return Err(ApsiError::PeerParamsTooCostly {
                ciphertexts,
                bundle_indices,
                powers,
                cap: MAX_ADOPTED_QUERY_CTS,
            });
        }
    }
    let params = &theirs;
    // Unique items, and where each query index points.
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by(|&a, &b| items[a].cmp(&items[b]));
    let mut unique: Vec<ItemDigest> = Vec::new();
    let mut slot_of = vec![0usize; items.len()];
    for &i in &order {
        if unique.last() != Some(&items[i]) {
            unique.push(items[i]);
        }
        slot_of[i] = unique.len() - 1;
    }
    if unique.len() > params.table.table_size {
        return Err(ApsiError::Cuckoo {
            items: unique.len(),
            table_size: params.table.table_size,
        });
    }
    let r = OprfScalar::random(OPRF_CURVE)?;
    let mut blinded = vec![0u8; unique.len() * POINT_LEN];
    r.hash_and_mul(&unique, &mut blinded)?;
    link.send(&wire::encode_oprf_query(&blinded))?;
    let evaluated = wire::decode_oprf_reply(&link.recv()?, unique.len())?;
    let mut points = vec![0u8; evaluated.len()];
    r.mul_inverse(&evaluated, &mut points)
        .map_err(|e| peer(format!("sent an invalid evaluated point: {e}")))?;
    if unique.is_empty() {
        return Ok(vec![None; items.len()]);
    }
    let split: Vec<(HashedItem, LabelKey)> = points
        .par_chunks(POINT_LEN)
        .map(|p| item::split(&tag(p)))
        .collect();
    let hashed: Vec<HashedItem> = split.iter().map(|s| s.0).collect();
    let table = cuckoo(
        &hashed,
        params.table.hash_func_count,
        params.table.table_size,
    )?;
    let ctx = params.context()?;
    let sk = SecretKey::generate(&ctx)?;
    let dag = PowersDag::new(params)?;
    let rk = if params.needs_products(&dag) {
        Some(RelinKeys::generate(&ctx, &sk)?)
    } else {
        None
    };
    let t = Modulus::new(params.plain_modulus())
        .ok_or_else(|| ApsiError::Input("plain modulus out of range".into()))?;
    let (f, bits, bpb) = (
        params.felts_per_item,
        params.bits_per_felt(),
        params.bins_per_bundle(),
    );
    let nidx = params.bundle_idx_count();
    let powers = &params.query.query_powers;
    link.send(&wire::encode_query_head(
        &ctx,
        rk.as_ref(),
        nidx * powers.len(),
    ))?;
    drop(rk);
    for b in 0..nidx {
        let mut y = vec![0u64; params.degree()];
        for j in 0..bpb {
            if let Some(u) = table[b * bpb + j] {
                let fs = item::item_felts(&hashed[u as usize], bits, f);
                y[j * f..(j + 1) * f].copy_from_slice(&fs);
            }
        }
        let msgs = powers
            .par_iter()
            .map(|&p| {
                let enc = BatchEncoder::new(&ctx);
                let yp: Vec<u64> = y.iter().map(|&v| t.pow(v, p as u64)).collect();
                let ct = cipher::encrypt_seeded(&ctx, &sk, &enc.encode(&yp)?)?;
                Ok(wire::encode_query_ct(&ctx, &ct))
            })
            .collect::<Result<Vec<_>>>()?;
        for m in msgs {
            link.send(&m)?;
        }
    }
    let parts = if label_len == 0 {
        0
    } else {
        item::label_parts(label_len, nonce_len, bits, f)
    };
    if parts > wire::MAX_LABEL_PARTS {
        return Err(peer(format!("labels of {parts} parts")));
    }
    let enc_len = label_len + nonce_len;
    let results = wire::decode_result_head(&link.recv()?)?;
    let enc = BatchEncoder::new(&ctx);
    let mut found: Vec<Option<Vec<u8>>> = vec![None; unique.len()];
    for _ in 0..results {
        let res = wire::decode_result(&ctx, &link.recv()?, nidx, parts)?;
        let m = enc.decode(&cipher::decrypt(&ctx, &sk, &res.matching)?);
        let hits: Vec<(usize, u32)> = (0..bpb)
            .filter_map(|j| {
                let u = table[res.index * bpb + j]?;
                (found[u as usize].is_none() && m[j * f..(j + 1) * f].iter().all(|&v| v == 0))
                    .then_some((j, u))
            })
            .collect();
        if hits.is_empty() {
            continue;
        }
        let label_slots = res
            .labels
            .iter()
            .map(|c| Ok(enc.decode(&cipher::decrypt(&ctx, &sk, c)?)))
            .collect::<Result<Vec<_>>>()?;
        for (j, u) in hits {
            let label = if parts == 0 {
                Vec::new()
            } else {
                let felts: Vec<u64> = label_slots
                    .iter()
                    .flat_map(|s| s[j * f..(j + 1) * f].iter().copied())
                    .collect();
                let encl = item::from_felts(&felts, bits, enc_len);
                item::decrypt_label(&split[u as usize].1, &encl, nonce_len)
            };
            found[u as usize] = Some(label);
        }
    }
    Ok(slot_of.iter().map(|&s| found[s].clone()).collect())
}
