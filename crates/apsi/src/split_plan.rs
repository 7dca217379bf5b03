//! The sender's own evaluation plan for parameters without Paterson–Stockmeyer
//! (`ps_low_degree` = 0): every degree d ≤ D is split as d = a + b with y^a and y^b both of
//! depth ≤ 1 (a source power, or a product of two), and
//!
//! Σ_d c_d·y^d = Σ_{d ∈ P} c_d·y^d + Σ_{b ∈ B} y^b · (Σ_{a : (a, b)} c_{a+b}·y^a),
//!
//! where P holds the degrees whose power is computed anyway (evaluated directly, ct×pt) and B
//! the "high" powers each inner sum is multiplied by. The receiver's messages are unchanged: it
//! sends the source powers the parameters name, and what the sender does with them is its own
//! choice (CMDGJLTW21 §4.3 make the same point for Paterson–Stockmeyer). The plain plan
//! computes every power 1..=D, one ct×ct each (220 at 1M-1-32); this one computes only the
//! powers in P ∪ B (a few dozen), and pays per polynomial one extension of each inner sum and
//! one scale-down of their summed tensors ([`blindjoin_he::eval::multiply_extended_sum`]).
//!
//! **Depth and noise.** The products y^a·y^b must be no deeper than the plain plan's powers,
//! which is what the parameters' moduli are sized for. With plain depth 2 (1M-1-32) every power
//! used has depth ≤ 1 and each product has depth 2, the plain plan's; with plain depth 1
//! (1M-1024-cmp's dense query powers) only source powers are used, so products have depth 1.
//! The noise is then a product's of the same depth, with the ct×pt factor on one operand
//! instead of after the product. Tested by evaluating the presets' polynomials at full degree
//! and decrypting.
//!
//! The same form also describes the plain plan (every degree direct) and the parameters' own
//! Paterson–Stockmeyer ([`SplitPlan::paterson_stockmeyer`]), so the sender has one evaluation
//! routine for all three.
//!
//! **Choice.** For each bound L the low set is A_L = the depth-≤1 powers up to L; B is chosen
//! greedily (the smallest uncovered degree takes the b that covers most new degrees). The plan
//! of least estimated cost (below) is used, or the plain plan if none is cheaper.

use std::collections::{BTreeMap, BTreeSet};

/// Cost of one relinearized product kept only for ct×pt, in μs at N = 8192 [56,48,48]
/// (`cargo bench -p blindjoin-he --bench bfv -- 8192`, "power step ... to NTT"); the other
/// costs are in the same unit, so only their ratios matter.
const PRODUCT: f64 = 2.4;
/// A product that is also a ct×ct operand (extended to Q∪P afterwards).
const PRODUCT_EXTENDED: f64 = 2.8;
/// One inner sum's P rows made (`extend_ntt`) and its tensor accumulated.
const INNER: f64 = 0.6;
/// One polynomial's scale-down of the summed tensors and its relinearization.
const PER_POLYNOMIAL: f64 = 2.3;

/// A split plan (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// Powers to compute (sorted), each a source or a product of two sources.
    powers: Vec<usize>,
    /// High powers b, each with the low degrees a (> 0) of its inner sum (ascending).
    high: Vec<(usize, Vec<usize>)>,
    /// Degrees evaluated directly (their power is in `powers`).
    direct: BTreeSet<usize>,
}

impl SplitPlan {
    /// The plain plan: every power 1..=d computed and used directly.
    pub fn plain(d: usize) -> Self {
        SplitPlan {
            powers: (1..=d).collect(),
            high: Vec::new(),
            direct: (1..=d).collect(),
        }
    }

    /// Paterson–Stockmeyer of low degree `low` > 0 (the parameters' `ps_low_degree`), as a
    /// split: the low powers 1..=L and the high powers jH (H = L + 1) are direct, and each high
    /// power carries the inner sum of c_{jH+i}·y^i, i = 1..=L. The chunk's constant c_{jH}
    /// is its high power's direct term, so an inner sum stays in NTT form until it is extended.
    pub fn paterson_stockmeyer(d: usize, low: usize) -> Self {
        let h = low + 1;
        let powers = crate::powers::target_powers(d, low);
        let high = (1..=d / h)
            .map(|j| {
                (
                    j * h,
                    (1..=low).filter(|i| j * h + i <= d).collect::<Vec<_>>(),
                )
            })
            .filter(|(_, lows)| !lows.is_empty())
            .collect();
        SplitPlan {
            direct: powers.iter().copied().collect(),
            powers,
            high,
        }
    }

    /// The cheapest split plan for degree `d` from `sources` (sorted, containing 1) when the
    /// powers are computed `bundle_idx` times and `polynomials` polynomials are evaluated, if
    /// it is cheaper than the plain plan; `None` otherwise (or for d ≤ 1). `plain_depth` is the
    /// plain plan's multiplicative depth, which the parameters' moduli are sized for: a split's
    /// products y^a·y^b must not be deeper, so with depth 1 only sources are used, and with
    /// depth 0 (every power a source) there is nothing to save.
    pub fn choose(
        sources: &[usize],
        d: usize,
        plain_depth: u32,
        bundle_idx: usize,
        polynomials: usize,
    ) -> Option<Self> {
        if d <= 1 || plain_depth == 0 {
            return None;
        }
        let depth1 = if plain_depth == 1 {
            sources.iter().copied().filter(|&s| s <= d).collect()
        } else {
            depth_one(sources, d)
        };
        let src: BTreeSet<usize> = sources.iter().copied().filter(|&s| s <= d).collect();
        let plain_products = (1..=d).filter(|p| !src.contains(p)).count();
        let plain_cost = bundle_idx as f64 * plain_products as f64 * PRODUCT;
        let mut best: Option<(f64, SplitPlan)> = None;
        for &l in &depth1 {
            let Some(plan) = Self::with_low_bound(&depth1, l, d) else {
                continue;
            };
            let cost = plan.cost(&src, bundle_idx, polynomials);
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                best = Some((cost, plan));
            }
        }
        best.filter(|(c, _)| *c < plain_cost).map(|(_, p)| p)
    }

    /// The plan with low set A = the depth-≤1 powers up to `l`; `None` if some degree cannot
    /// be covered.
    fn with_low_bound(depth1: &BTreeSet<usize>, l: usize, d: usize) -> Option<Self> {
        let low: Vec<usize> = depth1.range(..=l).copied().collect();
        let mut computed: BTreeSet<usize> = low.iter().copied().collect();
        let mut covered = vec![false; d + 1];
        covered[0] = true;
        for &a in &low {
            covered[a] = true;
        }
        let mut high: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for target in 1..=d {
            if covered[target] {
                continue;
            }
            // The b that covers `target` (b ≤ target, target − b ∈ A ∪ {0}) and most other
            // uncovered degrees.
            let mut pick: Option<(usize, usize)> = None;
            for &b in depth1.range(..=target) {
                let rest = target - b;
                if rest != 0 && low.binary_search(&rest).is_err() {
                    continue;
                }
                let gain = std::iter::once(0)
                    .chain(low.iter().copied())
                    .filter(|&a| b + a <= d && !covered[b + a])
                    .count();
                if pick.is_none_or(|(g, _)| gain > g) {
                    pick = Some((gain, b));
                }
            }
            let (_, b) = pick?;
            computed.insert(b);
            covered[b] = true;
            let lows: Vec<usize> = low
                .iter()
                .copied()
                .filter(|&a| b + a <= d && !covered[b + a])
                .collect();
            for &a in &lows {
                covered[b + a] = true;
            }
            high.insert(b, lows);
        }
        // A degree whose power is computed is evaluated directly, not through an inner sum.
        let direct: BTreeSet<usize> = computed.iter().copied().filter(|&p| p <= d).collect();
        let high = high
            .into_iter()
            .map(|(b, lows)| {
                let lows: Vec<usize> = lows
                    .into_iter()
                    .filter(|a| !direct.contains(&(b + a)))
                    .collect();
                (b, lows)
            })
            .filter(|(_, lows)| !lows.is_empty())
            .collect();
        Some(SplitPlan {
            powers: computed.into_iter().collect(),
            high,
            direct,
        })
    }

    fn cost(&self, sources: &BTreeSet<usize>, bundle_idx: usize, polynomials: usize) -> f64 {
        let products: f64 = self
            .powers
            .iter()
            .filter(|p| !sources.contains(p))
            .map(|p| {
                if self.is_high(*p) {
                    PRODUCT_EXTENDED
                } else {
                    PRODUCT
                }
            })
            .sum();
        let per_poly = if self.high.is_empty() {
            0.0
        } else {
            self.high.len() as f64 * INNER + PER_POLYNOMIAL
        };
        bundle_idx as f64 * products + polynomials as f64 * per_poly
    }

    /// The powers to compute (sorted; sources among them).
    pub fn powers(&self) -> &[usize] {
        &self.powers
    }

    /// Whether `p` is a high power (a ct×ct operand).
    pub fn is_high(&self, p: usize) -> bool {
        self.high.iter().any(|(b, _)| *b == p)
    }

    /// The high powers with their inner sums' low degrees.
    pub fn high(&self) -> &[(usize, Vec<usize>)] {
        &self.high
    }

    /// Whether degree `d` is evaluated directly.
    pub fn is_direct(&self, d: usize) -> bool {
        self.direct.contains(&d)
    }
}

/// The powers of depth ≤ 1 up to `d`: the sources and the sums of two of them.
fn depth_one(sources: &[usize], d: usize) -> BTreeSet<usize> {
    let src: Vec<usize> = sources.iter().copied().filter(|&s| s <= d).collect();
    let mut out: BTreeSet<usize> = src.iter().copied().collect();
    for (i, &x) in src.iter().enumerate() {
        for &y in &src[i..] {
            if x + y <= d {
                out.insert(x + y);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every degree 1..=d is evaluated exactly once, directly or as a + b, with every power
    /// used of depth ≤ 1.
    fn check(plan: &SplitPlan, sources: &[usize], d: usize) {
        let depth1 = depth_one(sources, d);
        assert!(plan.powers.iter().all(|p| depth1.contains(p)));
        let mut seen = vec![0u32; d + 1];
        for &p in &plan.direct {
            assert!(plan.powers.contains(&p));
            seen[p] += 1;
        }
        for (b, lows) in &plan.high {
            assert!(plan.powers.contains(b));
            for a in lows {
                assert!(*a > 0 && plan.powers.contains(a));
                seen[b + a] += 1;
            }
        }
        assert!(seen[1..].iter().all(|&n| n == 1), "{seen:?}");
    }

    #[test]
    fn the_seed_preset_takes_far_fewer_products() {
        // 1M-1-32: degree 228, 8 sources, one bundle index, 24 polynomials.
        let sources = [1, 3, 8, 19, 33, 39, 92, 102];
        let plan = SplitPlan::choose(&sources, 228, 2, 1, 24).unwrap();
        check(&plan, &sources, 228);
        let products = plan.powers.iter().filter(|p| !sources.contains(p)).count();
        assert!(products < 60, "{products} products, against 220");
    }

    #[test]
    fn every_degree_is_covered_once_for_the_presets_and_small_degrees() {
        let cases: [(&[usize], usize); 4] = [
            (&[1, 3, 8, 19, 33, 39, 92, 102], 228),
            (
                &[1, 3, 4, 5, 8, 14, 20, 26, 32, 38, 44, 47, 48, 49, 51, 52],
                101,
            ),
            (&[1, 2, 3], 9),
            (&[1], 2),
        ];
        for (sources, d) in cases {
            for top in [2, 3, d / 2, d] {
                for l in depth_one(sources, top) {
                    if let Some(p) = SplitPlan::with_low_bound(&depth_one(sources, top), l, top) {
                        check(&p, sources, top);
                    }
                }
            }
        }
    }

    #[test]
    fn plain_and_paterson_stockmeyer_cover_every_degree_once() {
        for d in [1, 2, 7, 26, 27, 28, 100, 782] {
            let all: Vec<usize> = (1..=d).collect();
            check(&SplitPlan::plain(d), &all, d);
            for low in [1, 3, 26] {
                let ps = SplitPlan::paterson_stockmeyer(d, low);
                check(&ps, &all, d);
                let h = low + 1;
                assert!(
                    ps.powers.iter().all(|&p| p <= low || p % h == 0),
                    "{d} {low}"
                );
            }
        }
    }

    /// With plain depth 1 the plan uses only sources, so its products stay at depth 1.
    #[test]
    fn a_depth_one_plain_plan_limits_the_split_to_sources() {
        let sources = [1, 3, 4, 5, 8, 14, 20, 26, 32, 38, 44, 47, 48, 49, 51, 52];
        if let Some(plan) = SplitPlan::choose(&sources, 101, 1, 3, 51) {
            assert!(plan.powers.iter().all(|p| sources.contains(p)), "{plan:?}");
            check(&plan, &sources, 101);
        }
    }

    #[test]
    fn the_plain_plan_is_kept_when_nothing_is_saved() {
        // Every power a source: nothing to save.
        let all: Vec<usize> = (1..=20).collect();
        assert_eq!(SplitPlan::choose(&all, 20, 0, 1, 10), None);
        assert_eq!(SplitPlan::choose(&[1], 1, 1, 1, 1), None);
    }
}
