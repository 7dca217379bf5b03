//! What `blindjoin run --help` says of three-party configs (`PROTOCOL_ECDH_3PC`); see
//! `blindjoin_protocols::ecdh_3pc` for the protocol and its leakage. The run itself is a
//! [`blindjoin_data::Plan`] like every other.

/// The end of `blindjoin run --help`: what the three-party protocol reveals, to whom.
pub(crate) const HELP: &str = "\
Three parties (protocol PROTOCOL_ECDH_3PC, SecretFlow's ECDH_PSI_3PC): give every party the same
config with three link_config.parties and protocol_config.receiver = the receiver's id, each with
its own self_link_party. Only the receiver learns the result and writes output. What each party
learns (semi-honest, no two parties colluding):
  - the receiver R: R ∩ P ∩ Q and the sizes |P|, |Q| — not |P ∩ Q|;
  - helper Q (the second non-receiver in link_config.parties): |P ∩ Q| and the sizes |R|, |P|;
  - helper P (the first non-receiver): the sizes |R|, |Q| only.
SecretFlow's ECDH_PSI_3PC leaks |A ∩ B| of two parties to the third, C. Here the one pairwise
count, |P ∩ Q|, goes to helper Q, which learns no items; the receiver gets P ∩ Q masked and padded
with random points to min(|P|, |Q|) (the cost: up to min(|P|, |Q|) more curve multiplications at
Q and at R, and as many points on the Q-R link). Inputs of more than 2^20 rows run in hash
buckets, and then every party also learns how many keys each other party has per bucket (and Q
|P ∩ Q| per bucket), as in two-party runs. Inner join only; no broadcast_result, no recovery.";
