//! [`MeshChoice`] and [`run_mesh`]: the protocols run among the parties of a mesh of links
//! (n-party PSI, and DP-PSI over its one link), and the one place such a choice becomes its
//! implementation — as [`crate::run_psi`] is for two parties.

use crate::dp_psi::{self, DpParams};
use crate::npc::{Links, NpcVariant, run_npc};
use crate::{
    Curve, Hello, ItemDigest, Progress, ProtocolChoice, ProtocolError, PsiOptions, Role, handshake,
};

/// A protocol among the parties of a mesh, with the parameters all of them must share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MeshChoice {
    /// An n-party PSI.
    Npc(NpcVariant),
    /// DP-PSI between two parties on this curve.
    Dp {
        /// The ECDH curve.
        curve: Curve,
        /// `dppsi_params`.
        params: DpParams,
    },
}

impl MeshChoice {
    /// The name in reports (SecretFlow's v1 names).
    pub fn name(&self) -> String {
        match self {
            MeshChoice::Npc(NpcVariant::ZeroShare(_)) => "PROTOCOL_NPC".into(),
            MeshChoice::Npc(NpcVariant::Iterated(ProtocolChoice::Kkrt)) => "KKRT_PSI_NPC".into(),
            MeshChoice::Npc(NpcVariant::Iterated(_)) => "ECDH_PSI_NPC".into(),
            MeshChoice::Dp { .. } => "DP_PSI_2PC".into(),
        }
    }
}

/// Where this party sits in the mesh, and the setup every party agreed on.
#[derive(Clone, Copy, Debug)]
pub struct MeshSeat {
    /// This party's index in the links.
    pub me: usize,
    /// The receiver's index.
    pub receiver: usize,
    /// A digest of the setup all parties share (protocol, parties, receiver, ...).
    pub setup: [u8; 16],
}

/// What a mesh protocol gave this party for one set of items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshOutput {
    /// The indices of our items in the result, at a party that learns it.
    pub intersection: Option<Vec<usize>>,
    /// How many items the other parties had, summed.
    pub others_items: u64,
}

/// Runs `choice` on `items` over `links` (indexed by party, `None` at `seat.me`).
///
/// # Errors
/// Protocol and link errors; a DP-PSI mesh without its one peer.
pub fn run_mesh(
    links: &mut Links<'_>,
    choice: MeshChoice,
    seat: MeshSeat,
    opts: &PsiOptions,
    items: &[ItemDigest],
    progress: &dyn Progress,
) -> Result<MeshOutput, ProtocolError> {
    match choice {
        MeshChoice::Npc(variant) => {
            let out = run_npc(
                links,
                seat.me,
                seat.receiver,
                variant,
                seat.setup,
                opts,
                items,
                progress,
            )?;
            let others_items = out
                .sizes
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != seat.me)
                .map(|(_, &n)| n)
                .sum();
            Ok(MeshOutput {
                intersection: out.intersection,
                others_items,
            })
        }
        MeshChoice::Dp { curve, params } => {
            let peer = 1 - seat.me.min(1);
            let link = links
                .get_mut(peer)
                .and_then(|l| l.as_mut())
                .ok_or(ProtocolError::Unreachable("DP-PSI has one peer"))?;
            let role = if seat.me == seat.receiver {
                Role::Receiver
            } else {
                Role::Sender
            };
            let hello = Hello::new(
                ProtocolChoice::Ecdh { curve },
                role,
                false,
                items.len() as u64,
            )
            .with_context(blindjoin_crypto::item_digest(
                [&seat.setup[..], &params.context()].concat().as_slice(),
            ));
            let hs = handshake(&mut **link, hello)?;
            let others_items = hs.theirs().item_count;
            let out = dp_psi::run(&mut **link, &hs, curve, params, opts, items, progress)?;
            Ok(MeshOutput {
                intersection: out.intersection,
                others_items,
            })
        }
    }
}
