//! Placing a bundle index's entries into bundles (first fit, with a swap for felt clashes in
//! labeled mode; see the parent module's doc).

use super::Entry;
use crate::item;

/// Whether two items share a felt in some slot.
fn clash(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).any(|(x, y)| x == y)
}

/// Places a bundle index's entries into bundles, first fit (see the module doc). In labeled
/// mode an item that fits no bundle only because of felt clashes first tries a swap: in some
/// bundle whose bin it would fit without one entry x (the one clash, or any entry of a full
/// bin), x moves to another bundle where it fits and the item takes its place. Without the
/// swap a handful of clashing items open a bundle of their own: at 1M-1-32's shape (2^20
/// items) 5 bundles of which the last held 3 entries, each bundle costing the receiver
/// 1 + label-parts ciphertexts.
pub(super) fn first_fit(
    list: Vec<(usize, Entry)>,
    bins: usize,
    max: usize,
    f: usize,
    bits: u32,
    labeled: bool,
) -> Vec<Vec<Vec<Entry>>> {
    let mut bundles: Vec<Vec<Vec<Entry>>> = Vec::new();
    // Felts of the entries already placed, per bundle and bin, for the labeled check.
    let mut felts: Vec<Vec<Vec<Vec<u64>>>> = Vec::new();
    for (j, e) in list {
        let ef = item::item_felts(&e.item, bits, f);
        let fits = |fl: &Vec<Vec<Vec<u64>>>, ef: &[u64]| {
            fl[j].len() < max && (!labeled || fl[j].iter().all(|o| !clash(o, ef)))
        };
        if let Some(k) = (0..bundles.len()).find(|&k| fits(&felts[k], &ef)) {
            bundles[k][j].push(e);
            felts[k][j].push(ef);
            continue;
        }
        let mut swap = None;
        if labeled {
            'search: for k in 0..bundles.len() {
                let bin = &felts[k][j];
                let clashes: Vec<usize> = (0..bin.len()).filter(|&i| clash(&bin[i], &ef)).collect();
                let candidates: Vec<usize> = match clashes.len() {
                    0 => (0..bin.len()).collect(),
                    1 => clashes,
                    _ => continue,
                };
                for x in candidates {
                    let xf = &felts[k][j][x];
                    if let Some(k2) = (0..bundles.len()).find(|&k2| k2 != k && fits(&felts[k2], xf))
                    {
                        swap = Some((k, x, k2));
                        break 'search;
                    }
                }
            }
        }
        match swap {
            Some((k, x, k2)) => {
                let moved = std::mem::replace(&mut bundles[k][j][x], e);
                let moved_f = std::mem::replace(&mut felts[k][j][x], ef);
                bundles[k2][j].push(moved);
                felts[k2][j].push(moved_f);
            }
            None => {
                let mut b = vec![Vec::new(); bins];
                let mut fl = vec![Vec::new(); bins];
                b[j].push(e);
                fl[j].push(ef);
                bundles.push(b);
                felts.push(fl);
            }
        }
    }
    bundles
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// Every entry once, bins within bounds, no two entries of a bin sharing a felt in a slot.
    fn assert_layout(b: &[Vec<Vec<Entry>>], max: usize, f: usize, bits: u32, total: usize) {
        let mut n = 0;
        for bundle in b {
            for bin in bundle {
                assert!(bin.len() <= max);
                n += bin.len();
                for (i, x) in bin.iter().enumerate() {
                    for y in &bin[..i] {
                        assert!(!clash(
                            &item::item_felts(&x.item, bits, f),
                            &item::item_felts(&y.item, bits, f)
                        ));
                    }
                }
            }
        }
        assert_eq!(n, total);
    }

    /// Small felts (4 bits, 2 per item) force many clashes: the swap keeps the layout valid.
    #[test]
    fn swaps_keep_bins_valid() {
        let mut state = 7u64;
        let list: Vec<(usize, Entry)> = (0..3000)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let mut item = [0u8; 16];
                item[..8].copy_from_slice(&(state >> 11).to_le_bytes());
                (
                    (state >> 40) as usize % 10,
                    Entry {
                        item,
                        label: Vec::new(),
                    },
                )
            })
            .collect();
        let b = first_fit(list, 10, 6, 2, 4, true);
        assert_layout(&b, 6, 2, 4, 3000);
    }

    /// Bundle fill at 1M-1-32's shape (1 hash function, 1638 bins, 228 per bin, 5 × 16-bit
    /// felts, labeled) for 2^20 pseudorandom items: `--ignored --nocapture` prints it.
    #[test]
    #[ignore]
    fn fill_at_2_20() {
        let mut state = 1u64;
        let list: Vec<(usize, Entry)> = (0..1usize << 20)
            .map(|_| {
                let mut item = [0u8; 16];
                for c in item.chunks_mut(8) {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    c.copy_from_slice(&(state ^ (state >> 29)).to_le_bytes());
                }
                (
                    item::location(&item, 0, 1638),
                    Entry {
                        item,
                        label: Vec::new(),
                    },
                )
            })
            .collect();
        let b = first_fit(list, 1638, 228, 5, 16, true);
        let fill: Vec<usize> = b.iter().map(|x| x.iter().map(Vec::len).sum()).collect();
        let maxload: Vec<usize> = b
            .iter()
            .map(|x| x.iter().map(Vec::len).max().unwrap_or(0))
            .collect();
        println!(
            "bundles {}, entries {fill:?}, fullest bins {maxload:?}",
            b.len()
        );
        assert_layout(&b, 228, 5, 16, 1 << 20);
    }
}
