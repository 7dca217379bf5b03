//! The specs of runs among three or more parties (and DP-PSI's two): the two-party settings
//! they share, the parties in order, who receives, and the protocol.

use crate::spec::RunSpec;
use blindjoin_link::{PartyAddr, TlsConfig};
use blindjoin_protocols::mesh::MeshChoice;

/// One party's three-party run.
#[derive(Clone, Debug)]
pub struct ThreePartySpec {
    /// The settings shared with two-party runs (input, output, keys, curve, timeouts, ...).
    /// `parties` holds this party and one peer only; the three are in [`Self::parties`].
    pub spec: RunSpec,
    /// The three parties, in `link_config.parties` order (which fixes the helpers' seats).
    pub parties: Vec<PartyAddr>,
    /// This party's index in `parties`.
    pub me: usize,
    /// The receiver's index in `parties`.
    pub receiver: usize,
    /// TLS files where this party listens (`server_ssl_opts`), with `enable_ssl`.
    pub tls_server: Option<TlsConfig>,
    /// TLS files where this party connects (`client_ssl_opts`), with `enable_ssl`.
    pub tls_client: Option<TlsConfig>,
}

impl ThreePartySpec {
    /// The string all three parties must agree on: the ids in order, then the receiver.
    pub fn setup(&self) -> String {
        let ids: Vec<&str> = self.parties.iter().map(|p| p.id.as_str()).collect();
        format!("{}>{}", ids.join(","), self.parties[self.receiver].id)
    }

    /// Whether this party is the receiver.
    pub fn is_receiver(&self) -> bool {
        self.me == self.receiver
    }
}

/// What runs among the parties: the protocols' [`MeshChoice`].
pub type NPartyProtocol = MeshChoice;

/// One party's n-party (or DP-PSI) run.
#[derive(Clone, Debug)]
pub struct NPartySpec {
    /// The settings shared with two-party runs (input, output, keys, timeouts, ...).
    pub spec: RunSpec,
    /// The parties, in `link_config.parties` order.
    pub parties: Vec<PartyAddr>,
    /// This party's index in `parties`.
    pub me: usize,
    /// The receiver's index in `parties`.
    pub receiver: usize,
    /// The protocol.
    pub protocol: NPartyProtocol,
    /// TLS files where this party listens (`server_ssl_opts`), with `enable_ssl`.
    pub tls_server: Option<TlsConfig>,
    /// TLS files where this party connects (`client_ssl_opts`), with `enable_ssl`.
    pub tls_client: Option<TlsConfig>,
}

impl NPartySpec {
    /// The string all parties must agree on: the protocol, the ids in order, the receiver, the
    /// key-column count and whether the result is broadcast.
    pub fn setup(&self) -> String {
        let ids: Vec<&str> = self.parties.iter().map(|p| p.id.as_str()).collect();
        let params = match self.protocol {
            NPartyProtocol::Dp { curve, params } => format!(
                "{curve}/{:016x}/{:016x}",
                params.bob_sub_sampling.to_bits(),
                params.epsilon.to_bits()
            ),
            NPartyProtocol::Npc(v) => v.name(),
        };
        format!(
            "{params}\0{}>{}\0{}\0{}",
            ids.join(","),
            self.parties[self.receiver].id,
            self.spec.keys.len(),
            if self.spec.broadcast_result {
                "broadcast"
            } else {
                "receiver only"
            }
        )
    }

    /// Whether this party is the receiver.
    pub fn is_receiver(&self) -> bool {
        self.me == self.receiver
    }
}
