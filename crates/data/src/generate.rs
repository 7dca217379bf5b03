//! Seeded test and benchmark tables: party `p` gets `rows[p]` rows whose keys are 16-hex-digit
//! ids; the first `overlap` ids are shared by every party, the rest are private to one party.
//! Rows are shuffled (seeded), so files are reproducible but not sorted. Ids come from a bijective
//! mix of a counter, so distinct ids never collide.

use crate::table::csv::write_record;

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenSpec {
    /// Rows per party (2 or 3 parties).
    pub rows: Vec<usize>,
    /// Keys shared by all parties (at most the smallest row count).
    pub overlap: usize,
    /// Seed for ids, payloads and shuffling.
    pub seed: u64,
    /// Number of payload columns besides the key(s).
    pub payload_columns: usize,
    /// Number of key columns (the id is split across them).
    pub key_columns: usize,
    /// Extra rows that repeat an existing key of the same party, as a fraction of `rows`.
    pub duplicate_fraction: f64,
}

/// SplitMix64's finaliser: a bijection on u64.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

/// Key column names for `k` key columns: `id`, or `id1..idk`.
pub fn key_names(k: usize) -> Vec<String> {
    if k <= 1 {
        vec!["id".to_string()]
    } else {
        (1..=k).map(|i| format!("id{i}")).collect()
    }
}

/// The CSV text of each party's table.
pub fn generate(spec: &GenSpec) -> Vec<Vec<u8>> {
    let key_columns = spec.key_columns.clamp(1, 4);
    let overlap = spec
        .overlap
        .min(spec.rows.iter().copied().min().unwrap_or(0));
    let id = |party: u64, i: u64| {
        mix(spec.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ ((party << 48) | i))
    };
    let mut out = Vec::new();
    for (p, &n) in spec.rows.iter().enumerate() {
        let mut rng = Rng(spec.seed ^ (p as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03));
        let mut ids: Vec<u64> = (0..n)
            .map(|i| {
                if i < overlap {
                    id(0, i as u64)
                } else {
                    id(p as u64 + 1, i as u64)
                }
            })
            .collect();
        let dups = (n as f64 * spec.duplicate_fraction.clamp(0.0, 10.0)) as usize;
        for _ in 0..dups.min(if n == 0 { 0 } else { usize::MAX }) {
            let pick = ids[rng.below(n)];
            ids.push(pick);
        }
        for i in (1..ids.len()).rev() {
            let j = rng.below(i + 1);
            ids.swap(i, j);
        }
        let mut names = key_names(key_columns);
        names.extend((1..=spec.payload_columns).map(|i| format!("payload{i}")));
        let mut text = Vec::with_capacity(ids.len() * (20 + 17 * spec.payload_columns));
        write_record(&mut text, names.iter().map(|s| s.as_bytes()));
        let mut fields: Vec<String> = Vec::new();
        for (row, &v) in ids.iter().enumerate() {
            fields.clear();
            let hex = format!("{v:016x}");
            if key_columns == 1 {
                fields.push(hex);
            } else {
                // Split the 16 digits over the key columns; the split is the same for everyone.
                let per = 16usize.div_ceil(key_columns);
                fields.extend(
                    hex.as_bytes()
                        .chunks(per)
                        .map(|c| String::from_utf8_lossy(c).into_owned()),
                );
                while fields.len() < key_columns {
                    fields.push("0".into());
                }
            }
            for c in 0..spec.payload_columns {
                fields.push(format!(
                    "{}-{:x}",
                    ["a", "b", "c"].get(p).unwrap_or(&"x"),
                    mix(v ^ (c as u64) ^ row as u64) >> 40
                ));
            }
            write_record(&mut text, fields.iter().map(|s| s.as_bytes()));
        }
        out.push(text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_exact_and_seeded() {
        let spec = GenSpec {
            rows: vec![1000, 700],
            overlap: 300,
            seed: 7,
            payload_columns: 2,
            key_columns: 1,
            duplicate_fraction: 0.0,
        };
        let t = generate(&spec);
        assert_eq!(t, generate(&spec));
        let ids = |b: &[u8]| -> std::collections::HashSet<String> {
            String::from_utf8_lossy(b)
                .lines()
                .skip(1)
                .map(|l| l.split(',').next().unwrap().to_string())
                .collect()
        };
        let (a, b) = (ids(&t[0]), ids(&t[1]));
        assert_eq!((a.len(), b.len()), (1000, 700));
        assert_eq!(a.intersection(&b).count(), 300);
    }
}
