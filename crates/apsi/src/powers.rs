//! Which powers of the query the sender computes, and how (APSI's `PowersDag`, CMDGJLTW21 §4).
//!
//! The receiver sends y^p for the source powers p ∈ query_powers. The sender needs the target
//! powers: 1..=D for plain evaluation of a degree-D polynomial, or with Paterson–Stockmeyer of
//! low degree L the low powers 1..=L and the high powers (L+1)·j, j = 1..=⌊D/(L+1)⌋
//! (D = max_items_per_bin). Each target that is not a source is one ciphertext product
//! y^a · y^b with a + b = p and a, b reached before; the number of products is |targets \
//! sources| whatever the choice, so the choice only sets the depth. Taking the targets in
//! increasing order and, for each, the split whose operands have the smallest depth is
//! depth-optimal: a power's depth depends only on the depths of smaller powers, each already
//! minimal. A target that no split reaches is a parameter error.

use crate::error::{ApsiError, Result};
use crate::params::ApsiParams;

/// How one power is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// Sent by the receiver.
    Source,
    /// The product of two smaller powers.
    Product(usize, usize),
}

/// The computation plan of the target powers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowersDag {
    /// (power, how, depth) in computation order (increasing power).
    nodes: Vec<(usize, Node, u32)>,
}

/// The target powers for degree `d` and low degree `l`.
pub fn target_powers(d: usize, l: usize) -> Vec<usize> {
    if l == 0 {
        return (1..=d).collect();
    }
    let mut t: Vec<usize> = (1..=l.min(d)).collect();
    let h = l + 1;
    t.extend((1..=d / h).map(|j| j * h));
    t.sort_unstable();
    t.dedup();
    t
}

impl PowersDag {
    /// The plan for `params` (sources query_powers, targets for max_items_per_bin).
    ///
    /// # Errors
    /// [`ApsiError::Params`] if a target cannot be reached.
    pub fn new(params: &ApsiParams) -> Result<Self> {
        Self::plan(
            &params.query.query_powers,
            &target_powers(params.table.max_items_per_bin, params.query.ps_low_degree),
        )
    }

    /// The plan that reaches `targets` (sorted) from `sources` (sorted, containing 1).
    ///
    /// # Errors
    /// [`ApsiError::Params`] if a target cannot be reached.
    pub fn plan(sources: &[usize], targets: &[usize]) -> Result<Self> {
        let mut depth: std::collections::BTreeMap<usize, u32> = std::collections::BTreeMap::new();
        let mut nodes = Vec::new();
        let mut all: Vec<usize> = sources.iter().chain(targets).copied().collect();
        all.sort_unstable();
        all.dedup();
        for p in all {
            if sources.contains(&p) {
                depth.insert(p, 0);
                nodes.push((p, Node::Source, 0));
                continue;
            }
            let mut best: Option<(u32, usize, usize)> = None;
            for (&a, &da) in depth.range(..=p / 2) {
                if let Some(&db) = depth.get(&(p - a)) {
                    let d = da.max(db) + 1;
                    if best.is_none_or(|(bd, _, _)| d < bd) {
                        best = Some((d, a, p - a));
                    }
                }
            }
            let Some((d, a, b)) = best else {
                return Err(ApsiError::Params {
                    field: "query_params.query_powers",
                    reason: format!(
                        "the sender cannot reach power {p} as a product of two powers it has"
                    ),
                });
            };
            depth.insert(p, d);
            nodes.push((p, Node::Product(a, b), d));
        }
        Ok(Self { nodes })
    }

    /// The multiplicative depth (0 when every target is a source).
    pub fn depth(&self) -> u32 {
        self.nodes.iter().map(|n| n.2).max().unwrap_or(0)
    }

    /// Ciphertext products the plan takes.
    pub fn products(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n.1, Node::Product(..)))
            .count()
    }

    /// (power, how, depth) in an order where every operand comes first.
    pub fn nodes(&self) -> &[(usize, Node, u32)] {
        &self.nodes
    }

    /// Whether power `p` is a factor of some product of the plan (so the sender needs it in the
    /// form ct×ct takes, not only the one ct×pt takes).
    pub fn is_operand(&self, p: usize) -> bool {
        self.nodes
            .iter()
            .any(|&(_, n, _)| matches!(n, Node::Product(a, b) if a == p || b == p))
    }

    /// The largest power computed.
    pub fn max_power(&self) -> usize {
        self.nodes.last().map_or(0, |n| n.0)
    }
}
