//! SecretFlow's v1 launches: `legacy_psi_config` (`psi.BucketPsiConfig`) with `link_config` and
//! `self_link_party`, as SecretFlow's v1 quick start tells users to write them. See
//! `docs/config.md` (section `legacy_psi_config`) for every field.
//!
//! A v1 config names one `psi_type`; each type becomes one of our [`Plan`]s by rewriting the
//! config into the v2 form its parser reads (`psi_config`, three-party `psi_config`, or
//! `ub_psi_config`), so each setting means exactly what it means there. Errors from those
//! parsers are renamed back to the v1 fields the user wrote. The party's role is not written in
//! a v1 config: `receiver_rank` indexes `link_config.parties`, and the party there is the
//! receiver (the unbalanced client, except in `ECDH_OPRF_UB_PSI_2PC_SHUFFLE_ONLINE`, where the
//! receiver is the server: the large set's holder gets the result).
//!
//! SecretFlow's `psi_csv(...)` builds a `BucketPsiConfig` from its arguments; so does
//! [`super::psi_csv`] for the protocols that are not balanced two-party ones.

use super::{Envelope, Extensions, LinkConfig, invalid, lenient_u64};
use crate::error::ConfigError;
use crate::plan::Plan;
use blindjoin_protocols::rr22::Rr22Mode;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::path::Path;

/// The top-level key that selects this parser.
pub const KEY: &str = "legacy_psi_config";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyLaunch<E> {
    legacy_psi_config: BucketPsiConfig,
    link_config: Option<LinkConfig>,
    self_link_party: Option<String>,
    blindjoin: Option<E>,
}

/// SecretFlow's `psi.BucketPsiConfig`. Protobuf's JSON mapping also accepts lowerCamelCase
/// names, so both spellings are read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketPsiConfig {
    #[serde(alias = "psiType")]
    psi_type: Option<Value>,
    #[serde(alias = "receiverRank")]
    receiver_rank: Option<Value>,
    #[serde(alias = "broadcastResult")]
    broadcast_result: Option<bool>,
    #[serde(alias = "inputParams")]
    input_params: Option<InputParams>,
    #[serde(alias = "outputParams")]
    output_params: Option<OutputParams>,
    #[serde(alias = "curveType")]
    curve_type: Option<Value>,
    #[serde(alias = "bucketSize")]
    bucket_size: Option<Value>,
    #[serde(alias = "preprocessPath")]
    preprocess_path: Option<String>,
    #[serde(alias = "ecdhSecretKeyPath")]
    ecdh_secret_key_path: Option<String>,
    #[serde(alias = "dppsiParams")]
    dppsi_params: Option<DpPsiParams>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputParams {
    path: Option<String>,
    #[serde(alias = "selectFields")]
    select_fields: Option<Vec<String>>,
    precheck: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputParams {
    path: Option<String>,
    #[serde(alias = "needSort")]
    need_sort: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DpPsiParams {
    #[serde(alias = "bobSubSampling")]
    bob_sub_sampling: Option<f64>,
    epsilon: Option<f64>,
}

/// A step of SecretFlow's v1 unbalanced PSI (`ECDH_OPRF_UB_PSI_2PC_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UbStep {
    /// The server evaluates its set into its cache, alone.
    GenCache,
    /// The server sends its cache; the client keeps it at `preprocess_path`.
    TransferCache,
    /// Gen cache and transfer in one run.
    Offline,
    /// The client queries; the client learns the result.
    Online,
    /// The client queries; the server (the large set's holder) learns the result.
    ShuffleOnline,
}

/// SecretFlow's `psi.PsiType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsiType {
    /// `ECDH_PSI_2PC` (1).
    Ecdh2pc,
    /// `KKRT_PSI_2PC` (2).
    Kkrt2pc,
    /// `BC22_PSI_2PC` (3): removed from SecretFlow; refused.
    Bc22,
    /// `ECDH_PSI_3PC` (4).
    Ecdh3pc,
    /// `ECDH_PSI_NPC` (5).
    EcdhNpc,
    /// `KKRT_PSI_NPC` (6).
    KkrtNpc,
    /// `ECDH_OPRF_UB_PSI_2PC_*` (7 to 11).
    Ub(UbStep),
    /// `DP_PSI_2PC` (12).
    DpPsi2pc,
    /// `RR22_FAST_PSI_2PC` (13), `RR22_LOWCOMM_PSI_2PC` (14), `RR22_MALICIOUS_PSI_2PC` (15).
    Rr22(Rr22Mode),
}

/// Every `PsiType` by name and number (`psi.proto`).
const PSI_TYPES: [(&str, u64, PsiType); 15] = [
    ("ECDH_PSI_2PC", 1, PsiType::Ecdh2pc),
    ("KKRT_PSI_2PC", 2, PsiType::Kkrt2pc),
    ("BC22_PSI_2PC", 3, PsiType::Bc22),
    ("ECDH_PSI_3PC", 4, PsiType::Ecdh3pc),
    ("ECDH_PSI_NPC", 5, PsiType::EcdhNpc),
    ("KKRT_PSI_NPC", 6, PsiType::KkrtNpc),
    (
        "ECDH_OPRF_UB_PSI_2PC_GEN_CACHE",
        7,
        PsiType::Ub(UbStep::GenCache),
    ),
    (
        "ECDH_OPRF_UB_PSI_2PC_TRANSFER_CACHE",
        8,
        PsiType::Ub(UbStep::TransferCache),
    ),
    (
        "ECDH_OPRF_UB_PSI_2PC_OFFLINE",
        9,
        PsiType::Ub(UbStep::Offline),
    ),
    (
        "ECDH_OPRF_UB_PSI_2PC_ONLINE",
        10,
        PsiType::Ub(UbStep::Online),
    ),
    (
        "ECDH_OPRF_UB_PSI_2PC_SHUFFLE_ONLINE",
        11,
        PsiType::Ub(UbStep::ShuffleOnline),
    ),
    ("DP_PSI_2PC", 12, PsiType::DpPsi2pc),
    ("RR22_FAST_PSI_2PC", 13, PsiType::Rr22(Rr22Mode::Fast)),
    ("RR22_LOWCOMM_PSI_2PC", 14, PsiType::Rr22(Rr22Mode::LowComm)),
    (
        "RR22_MALICIOUS_PSI_2PC",
        15,
        PsiType::Rr22(Rr22Mode::Malicious),
    ),
];

impl PsiType {
    /// The type SecretFlow names `name` (exact spelling, as protobuf's JSON parser wants it).
    pub fn from_name(name: &str) -> Option<PsiType> {
        PSI_TYPES
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, _, t)| t)
    }

    /// SecretFlow's name.
    pub fn name(self) -> &'static str {
        PSI_TYPES
            .iter()
            .find(|(_, _, t)| *t == self)
            .map_or("INVALID_PSI_TYPE", |&(n, _, _)| n)
    }

    /// Whether the type is a balanced two-party protocol (ECDH, KKRT, RR22).
    pub fn is_two_party(self) -> bool {
        matches!(self, PsiType::Ecdh2pc | PsiType::Kkrt2pc | PsiType::Rr22(_))
    }

    /// Parses `psi_type` as protobuf's JSON mapping writes an enum: its name or its number.
    fn parse(v: Option<&Value>) -> Result<PsiType, ConfigError> {
        let field = format!("{KEY}.psi_type");
        let names = "ECDH_PSI_2PC, KKRT_PSI_2PC, RR22_FAST_PSI_2PC, RR22_LOWCOMM_PSI_2PC, \
                     RR22_MALICIOUS_PSI_2PC, ECDH_PSI_3PC, ECDH_PSI_NPC, KKRT_PSI_NPC, DP_PSI_2PC or \
                     ECDH_OPRF_UB_PSI_2PC_{GEN_CACHE, \
                     TRANSFER_CACHE, OFFLINE, ONLINE, SHUFFLE_ONLINE}";
        let found = match v {
            None => None,
            Some(Value::String(s)) => PSI_TYPES.iter().find(|(n, _, _)| *n == s.trim()),
            Some(Value::Number(n)) => PSI_TYPES.iter().find(|(_, k, _)| Some(*k) == n.as_u64()),
            Some(_) => None,
        };
        match (found, v) {
            (Some(&(_, _, t)), _) => Ok(t),
            (None, None) => Err(invalid(&field, &format!("missing; use {names}"))),
            (None, Some(v)) => Err(invalid(
                &field,
                &format!("unknown or invalid type {v}; use {names}"),
            )),
        }
    }
}

/// SecretFlow's `psi.CurveType` by number (`curve_type` may be written either way).
const CURVES: [(u64, &str); 5] = [
    (1, "CURVE_25519"),
    (2, "CURVE_FOURQ"),
    (3, "CURVE_SM2"),
    (4, "CURVE_SECP256K1"),
    (5, "CURVE_25519_ELLIGATOR2"),
];

/// Why `BC22_PSI_2PC` is refused.
const BC22_WITHDRAWN: &str = "BC22_PSI_2PC (PCG-PSI, number 3) was withdrawn from SecretFlow \
    after a security flaw was found in it (its number is reserved in psi.proto) and is not \
    offered here; use RR22_FAST_PSI_2PC (or RR22_LOWCOMM_PSI_2PC for less traffic, \
    RR22_MALICIOUS_PSI_2PC against a malicious sender), the VOLE-based protocol that replaced it";

/// What SecretFlow's `precheck` (`precheck_input` in `psi_csv`) means here, for a warning.
pub(crate) fn precheck_warning(field: &str) -> String {
    format!(
        "{field}: SecretFlow's check of the key columns for duplicates before the run; blindjoin \
         always accepts duplicate keys and writes every row of a matching key, so there is \
         nothing to refuse (the input is still validated: header, key columns, field counts)"
    )
}

/// Parses a v1 launch config into its plan; `source` names it in errors, relative paths resolve
/// against `base_dir`.
///
/// # Errors
/// Syntax errors and unknown fields (with the field path, line and column), invalid values
/// (naming the v1 field), `BC22_PSI_2PC` (withdrawn), and the types not built yet.
pub fn parse_legacy_launch_config(
    text: &str,
    source: &str,
    base_dir: &Path,
) -> Result<Plan, ConfigError> {
    legacy(&Envelope::parse(text, source, base_dir)?)
}

/// As [`parse_legacy_launch_config`], from a parsed launch config: the v1 config is mapped to
/// its v2 form as a value, which the v2 parser of its kind reads.
///
/// # Errors
/// As [`parse_legacy_launch_config`].
pub(crate) fn legacy(env: &Envelope) -> Result<Plan, ConfigError> {
    let cfg = env.typed_kind::<LegacyLaunch<Value>>(&[KEY])?;
    let mut warnings = env.warnings().to_vec();
    let b = &cfg.legacy_psi_config;
    let psi_type = PsiType::parse(b.psi_type.as_ref())?;
    // Our extensions are checked with the parser that will read them, on the user's config,
    // so an unknown field there is reported at its line and column.
    if cfg.blindjoin.is_some() {
        match psi_type {
            PsiType::Ub(_) => {
                env.typed::<LegacyLaunch<super::ub::UbExtensions>>()?;
            }
            _ => {
                env.typed::<LegacyLaunch<Extensions>>()?;
            }
        }
    }
    let link = env.value().get("link_config").cloned();
    let ext = env.value().get("blindjoin").cloned();

    let common = Common::read(b, &cfg, &mut warnings)?;
    let (launch, renames): (Value, &[(&str, &str)]) = match psi_type {
        PsiType::Bc22 => return Err(invalid(&format!("{KEY}.psi_type"), BC22_WITHDRAWN)),
        PsiType::EcdhNpc | PsiType::KkrtNpc | PsiType::DpPsi2pc => (
            n_party(psi_type, &common, link, ext, &mut warnings)?,
            TWO_PARTY_RENAMES,
        ),
        PsiType::Ecdh2pc | PsiType::Kkrt2pc | PsiType::Rr22(_) => (
            two_party(psi_type, &common, link, ext, &mut warnings)?,
            TWO_PARTY_RENAMES,
        ),
        PsiType::Ecdh3pc => (
            three_party(&common, link, ext, &mut warnings)?,
            TWO_PARTY_RENAMES,
        ),
        PsiType::Ub(step) => (
            unbalanced(step, &common, link, ext, &mut warnings, env.base_dir())?,
            UB_RENAMES,
        ),
    };
    // The v2 form, with no warnings of its own: the v1 parse's come first, from `warnings`.
    let v2 = env.rewritten(launch);
    let plan = match psi_type {
        PsiType::Ecdh3pc => super::three_party::three_party(&v2)
            .map_err(|e| rename(e, renames))?
            .map(|t| Plan::ThreeParty(Box::new(t)))
            .ok_or_else(|| invalid(&format!("{KEY}.psi_type"), "ECDH_PSI_3PC: internal error"))?,
        PsiType::EcdhNpc | PsiType::KkrtNpc | PsiType::DpPsi2pc => super::n_party::n_party(&v2)
            .map_err(|e| rename(e, renames))?
            .map(|t| Plan::NParty(Box::new(t)))
            .ok_or_else(|| {
                invalid(
                    &format!("{KEY}.psi_type"),
                    &format!("{}: internal error", psi_type.name()),
                )
            })?,
        PsiType::Ub(_) => super::ub::unbalanced(&v2)
            .map(|u| Plan::Unbalanced(Box::new(u)))
            .map_err(|e| rename(e, renames))?,
        _ => super::two_party(&v2)
            .map(|s| Plan::TwoParty(Box::new(s)))
            .map_err(|e| rename(e, renames))?,
    };
    Ok(with_warnings(plan, warnings, renames))
}

/// What every type reads the same way.
struct Common {
    /// `self_link_party`.
    self_link_party: Option<String>,
    /// `link_config.parties` ids, in order (empty without a link).
    ids: Vec<String>,
    /// This party's index in `ids` (`None` without a link).
    me: Option<usize>,
    /// `receiver_rank`.
    receiver_rank: usize,
    broadcast_result: bool,
    input: Option<String>,
    keys: Vec<String>,
    output: Option<String>,
    need_sort: bool,
    /// `bucket_size`, when set (0 is protobuf's default: unset).
    bucket_size: Option<u64>,
    /// `curve_type` by name, when set (0, `CURVE_INVALID_TYPE`, is unset).
    curve: Option<String>,
    preprocess_path: Option<String>,
    ecdh_secret_key_path: Option<String>,
    /// `dppsi_params` (`bob_sub_sampling`, `epsilon`), each when set.
    dppsi: Option<(Option<f64>, Option<f64>)>,
}

impl Common {
    fn read(
        b: &BucketPsiConfig,
        cfg: &LegacyLaunch<Value>,
        warnings: &mut Vec<String>,
    ) -> Result<Common, ConfigError> {
        let ids: Vec<String> = cfg
            .link_config
            .as_ref()
            .map(|l| l.parties.iter().map(|p| p.id.clone()).collect())
            .unwrap_or_default();
        let me = cfg
            .self_link_party
            .as_ref()
            .and_then(|s| ids.iter().position(|id| id == s));
        let receiver_rank = match &b.receiver_rank {
            None => 0,
            Some(v) => lenient_u64(v, &format!("{KEY}.receiver_rank"))?,
        };
        if !ids.is_empty() && receiver_rank >= ids.len() as u64 {
            return Err(invalid(
                &format!("{KEY}.receiver_rank"),
                &format!(
                    "{receiver_rank}, but link_config.parties has {} parties (ranks 0 to {})",
                    ids.len(),
                    ids.len() - 1
                ),
            ));
        }
        let nonempty = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let input = b.input_params.as_ref();
        let output = b.output_params.as_ref();
        if input.and_then(|i| i.precheck) == Some(true) {
            warnings.push(precheck_warning(&format!("{KEY}.input_params.precheck")));
        }
        let bucket_size = match &b.bucket_size {
            None => None,
            Some(v) => Some(lenient_u64(v, &format!("{KEY}.bucket_size"))?).filter(|&n| n > 0),
        };
        let curve = match &b.curve_type {
            None => None,
            Some(Value::String(s)) if s.trim().is_empty() || s.trim() == "CURVE_INVALID_TYPE" => {
                None
            }
            Some(Value::String(s)) => Some(s.trim().to_string()),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => None,
            Some(Value::Number(n)) => Some(
                CURVES
                    .iter()
                    .find(|(k, _)| Some(*k) == n.as_u64())
                    .map(|(_, name)| name.to_string())
                    .ok_or_else(|| {
                        invalid(
                            &format!("{KEY}.curve_type"),
                            &format!("unknown curve number {n}; use 1 to 5 or a name"),
                        )
                    })?,
            ),
            Some(v) => {
                return Err(invalid(
                    &format!("{KEY}.curve_type"),
                    &format!("expected a curve name such as \"CURVE_FOURQ\", got {v}"),
                ));
            }
        };
        let is_dp = PsiType::parse(b.psi_type.as_ref()).ok() == Some(PsiType::DpPsi2pc);
        if let Some(d) = b.dppsi_params.as_ref().filter(|_| !is_dp) {
            let _ = (d.bob_sub_sampling, d.epsilon);
            warnings.push(format!(
                "{KEY}.dppsi_params: the parameters of DP_PSI_2PC; ignored for {}",
                PsiType::parse(b.psi_type.as_ref())
                    .map(PsiType::name)
                    .unwrap_or("this type")
            ));
        }
        Ok(Common {
            self_link_party: cfg.self_link_party.clone(),
            ids,
            me,
            receiver_rank: receiver_rank as usize,
            broadcast_result: b.broadcast_result.unwrap_or(false),
            input: input.and_then(|i| nonempty(&i.path)),
            keys: input
                .and_then(|i| i.select_fields.clone())
                .unwrap_or_default(),
            output: output.and_then(|o| nonempty(&o.path)),
            need_sort: output.and_then(|o| o.need_sort).unwrap_or(false),
            bucket_size,
            curve,
            preprocess_path: nonempty(&b.preprocess_path),
            ecdh_secret_key_path: nonempty(&b.ecdh_secret_key_path),
            dppsi: b
                .dppsi_params
                .as_ref()
                .map(|d| (d.bob_sub_sampling, d.epsilon)),
        })
    }

    /// Whether this party is the one at `receiver_rank`, once the link names it.
    fn is_receiver(&self) -> Result<bool, ConfigError> {
        if self.ids.is_empty() {
            return Err(invalid(
                "link_config",
                &format!(
                    "missing; it lists the parties, and {KEY}.receiver_rank picks the receiver \
                     among them"
                ),
            ));
        }
        match (self.me, self.self_link_party.as_deref()) {
            (Some(me), _) => Ok(me == self.receiver_rank),
            (None, None) => Err(invalid(
                "self_link_party",
                "missing; set it to this party's id from link_config.parties",
            )),
            (None, Some(s)) => Err(invalid(
                "self_link_party",
                &format!(
                    "{s:?} is not one of the ids in link_config.parties {:?}",
                    self.ids
                ),
            )),
        }
    }

    /// Warns that a field set for another type is ignored by this one.
    fn warn_unused(&self, t: PsiType, warnings: &mut Vec<String>) {
        let ub = matches!(t, PsiType::Ub(_));
        if !ub && self.preprocess_path.is_some() {
            warnings.push(format!(
                "{KEY}.preprocess_path: the unbalanced (ECDH_OPRF_UB_PSI_2PC_*) cache; ignored \
                 for {}",
                t.name()
            ));
        }
        if !ub && self.ecdh_secret_key_path.is_some() {
            warnings.push(format!(
                "{KEY}.ecdh_secret_key_path: the unbalanced server's key; ignored for {} (its \
                 keys are random per run)",
                t.name()
            ));
        }
        let bucketed = matches!(t, PsiType::Kkrt2pc | PsiType::Rr22(_));
        if !bucketed && let Some(n) = self.bucket_size {
            warnings.push(format!(
                "{KEY}.bucket_size = {n}: the keys per hash bucket of KKRT and RR22; ignored for \
                 {} ({})",
                t.name(),
                if ub {
                    "the unbalanced run has no buckets"
                } else {
                    "ECDH runs with the default 1048576 keys per bucket"
                }
            ));
        }
        if matches!(t, PsiType::Kkrt2pc | PsiType::Rr22(_)) && self.curve.is_some() {
            warnings.push(format!(
                "{KEY}.curve_type: the ECDH curve; ignored for {}",
                t.name()
            ));
        }
    }
}

/// The v2 fields the rewritten configs use, and the v1 fields the user wrote for them.
const TWO_PARTY_RENAMES: &[(&str, &str)] = &[
    (
        "psi_config.protocol_config.ecdh_config.curve",
        "legacy_psi_config.curve_type",
    ),
    (
        "psi_config.protocol_config.rr22_config.bucket_size",
        "legacy_psi_config.bucket_size",
    ),
    (
        "psi_config.protocol_config.kkrt_config.bucket_size",
        "legacy_psi_config.bucket_size",
    ),
    (
        "psi_config.protocol_config.broadcast_result",
        "legacy_psi_config.broadcast_result",
    ),
    (
        "psi_config.protocol_config.receiver",
        "legacy_psi_config.receiver_rank",
    ),
    (
        "psi_config.protocol_config.role",
        "legacy_psi_config.receiver_rank",
    ),
    (
        "psi_config.protocol_config.protocol",
        "legacy_psi_config.psi_type",
    ),
    (
        "psi_config.input_config.path",
        "legacy_psi_config.input_params.path",
    ),
    (
        "psi_config.output_config.path",
        "legacy_psi_config.output_params.path",
    ),
    (
        "psi_config.keys",
        "legacy_psi_config.input_params.select_fields",
    ),
    (
        "psi_config.disable_alignment",
        "legacy_psi_config.output_params.need_sort",
    ),
];

const UB_RENAMES: &[(&str, &str)] = &[
    (
        "ub_psi_config.cache_path",
        "legacy_psi_config.preprocess_path",
    ),
    (
        "ub_psi_config.server_secret_key_path",
        "legacy_psi_config.ecdh_secret_key_path",
    ),
    (
        "ub_psi_config.input_config.path",
        "legacy_psi_config.input_params.path",
    ),
    (
        "ub_psi_config.output_config.path",
        "legacy_psi_config.output_params.path",
    ),
    (
        "ub_psi_config.keys",
        "legacy_psi_config.input_params.select_fields",
    ),
    ("ub_psi_config.mode", "legacy_psi_config.psi_type"),
    ("ub_psi_config.role", "legacy_psi_config.receiver_rank"),
    (
        "ub_psi_config.client_get_result",
        "legacy_psi_config.broadcast_result",
    ),
    (
        "ub_psi_config.server_get_result",
        "legacy_psi_config.broadcast_result",
    ),
    ("blindjoin.curve", "legacy_psi_config.curve_type"),
];

/// Renames the v2 fields in an error (its field and its message) to the v1 ones.
pub(crate) fn rename(e: ConfigError, table: &[(&str, &str)]) -> ConfigError {
    let swap = |s: String| table.iter().fold(s, |s, (from, to)| s.replace(from, to));
    match e {
        ConfigError::Invalid { field, message } => ConfigError::Invalid {
            field: swap(field),
            message: swap(message),
        },
        ConfigError::NotYetSupported { field, value, hint } => ConfigError::NotYetSupported {
            field: swap(field),
            value,
            hint: swap(hint),
        },
        other => other,
    }
}

/// The plan with the v1 parse's warnings first, and the v2 parser's renamed.
fn with_warnings(mut plan: Plan, mut ours: Vec<String>, table: &[(&str, &str)]) -> Plan {
    let theirs = warnings_of(&mut plan);
    for w in theirs.drain(..) {
        let w = table.iter().fold(w, |s, (from, to)| s.replace(from, to));
        ours.push(w);
    }
    *theirs = ours;
    plan
}

/// A plan's warnings, to add to or rename.
pub(crate) fn warnings_of(plan: &mut Plan) -> &mut Vec<String> {
    plan.kind_of_mut().warnings_mut()
}

/// The launch's top level around a rewritten runtime config.
fn launch(
    key: &str,
    runtime: Value,
    link: Option<Value>,
    self_link_party: Option<&str>,
    ext: Option<Value>,
) -> Value {
    let mut top = Map::new();
    top.insert(key.into(), runtime);
    if let Some(l) = link {
        top.insert("link_config".into(), l);
    }
    if let Some(s) = self_link_party {
        top.insert("self_link_party".into(), s.into());
    }
    if let Some(e) = ext {
        top.insert("blindjoin".into(), e);
    }
    Value::Object(top)
}

/// A v2 launch config with a `psi_config` of `protocol_config` = `pc` and the v1 config's
/// input, output, keys and sorting.
fn psi_launch(c: &Common, pc: Value, link: Option<Value>, ext: Option<Value>) -> Value {
    let mut psi = json!({
        "protocol_config": pc,
        "input_config": io(&c.input),
        "keys": c.keys,
        "disable_alignment": !c.need_sort,
    });
    if c.output.is_some() {
        psi["output_config"] = io(&c.output);
    }
    launch("psi_config", psi, link, c.self_link_party.as_deref(), ext)
}

fn io(path: &Option<String>) -> Value {
    json!({ "type": "IO_TYPE_FILE_CSV", "path": path.clone().unwrap_or_default() })
}

/// ECDH, KKRT and RR22 between two parties: a v2 `psi_config`.
fn two_party(
    t: PsiType,
    c: &Common,
    link: Option<Value>,
    ext: Option<Value>,
    warnings: &mut Vec<String>,
) -> Result<Value, ConfigError> {
    let receiver = c.is_receiver()?;
    if c.ids.len() != 2 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {} parties; {} runs between exactly 2 (three parties: ECDH_PSI_3PC)",
                c.ids.len(),
                t.name()
            ),
        ));
    }
    c.warn_unused(t, warnings);
    let mut pc = json!({
        "role": if receiver { "ROLE_RECEIVER" } else { "ROLE_SENDER" },
        "broadcast_result": c.broadcast_result,
    });
    match t {
        PsiType::Ecdh2pc => {
            let curve = c.curve.clone().ok_or_else(|| {
                invalid(
                    &format!("{KEY}.curve_type"),
                    "required for ECDH_PSI_2PC (SecretFlow refuses CURVE_INVALID_TYPE too); \
                     e.g. \"CURVE_FOURQ\", \"CURVE_25519\", \"CURVE_SECP256K1\" or \"CURVE_SM2\"",
                )
            })?;
            pc["protocol"] = "PROTOCOL_ECDH".into();
            pc["ecdh_config"] = json!({ "curve": curve });
        }
        PsiType::Kkrt2pc => {
            pc["protocol"] = "PROTOCOL_KKRT".into();
            if let Some(n) = c.bucket_size {
                pc["kkrt_config"] = json!({ "bucket_size": n });
            }
        }
        PsiType::Rr22(mode) => {
            pc["protocol"] = "PROTOCOL_RR22".into();
            let mut rr = json!({
                "low_comm_mode": mode == Rr22Mode::LowComm,
                "malicious": mode == Rr22Mode::Malicious,
            });
            if let Some(n) = c.bucket_size {
                rr["bucket_size"] = n.into();
            }
            pc["rr22_config"] = rr;
        }
        _ => {}
    }
    Ok(psi_launch(c, pc, link, ext))
}

/// ECDH among three parties: a v2 three-party `psi_config`, the receiver by `receiver_rank`.
fn three_party(
    c: &Common,
    link: Option<Value>,
    ext: Option<Value>,
    warnings: &mut Vec<String>,
) -> Result<Value, ConfigError> {
    c.is_receiver()?;
    if c.ids.len() != 3 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {} parties; ECDH_PSI_3PC needs exactly 3 (the receiver at \
                 {KEY}.receiver_rank and two helpers)",
                c.ids.len()
            ),
        ));
    }
    c.warn_unused(PsiType::Ecdh3pc, warnings);
    let curve = c.curve.clone().ok_or_else(|| {
        invalid(
            &format!("{KEY}.curve_type"),
            "required for ECDH_PSI_3PC; e.g. \"CURVE_FOURQ\" or \"CURVE_25519\"",
        )
    })?;
    let pc = json!({
        "protocol": "PROTOCOL_ECDH_3PC",
        "receiver": c.ids[c.receiver_rank],
        "ecdh_config": { "curve": curve },
        "broadcast_result": c.broadcast_result,
    });
    Ok(psi_launch(c, pc, link, ext))
}

/// `ECDH_PSI_NPC` / `KKRT_PSI_NPC` (n ≥ 3 parties, SecretFlow's tree of two-party runs) and
/// `DP_PSI_2PC` (two parties): a v2 config for [`super::parse_n_party_config`], the receiver by
/// `receiver_rank`.
fn n_party(
    t: PsiType,
    c: &Common,
    link: Option<Value>,
    ext: Option<Value>,
    warnings: &mut Vec<String>,
) -> Result<Value, ConfigError> {
    c.is_receiver()?;
    let dp = t == PsiType::DpPsi2pc;
    let n = c.ids.len();
    if (dp && n != 2) || (!dp && n < 3) {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {n} parties; {} needs {}",
                t.name(),
                if dp { "exactly 2" } else { "at least 3" }
            ),
        ));
    }
    let receiver = c.ids.get(c.receiver_rank).ok_or_else(|| {
        invalid(
            &format!("{KEY}.receiver_rank"),
            &format!("{} is not a party index (0 to {})", c.receiver_rank, n - 1),
        )
    })?;
    c.warn_unused(t, warnings);
    let mut pc = json!({
        "protocol": t.name(),
        "receiver": receiver,
        "broadcast_result": c.broadcast_result,
    });
    if t != PsiType::KkrtNpc {
        let curve = match (&c.curve, dp) {
            (Some(curve), _) => curve.clone(),
            // SecretFlow's DP-PSI runs on Curve25519 unless told otherwise.
            (None, true) => "CURVE_25519".to_string(),
            (None, false) => {
                return Err(invalid(
                    &format!("{KEY}.curve_type"),
                    "required for ECDH_PSI_NPC; e.g. \"CURVE_FOURQ\" or \"CURVE_25519\"",
                ));
            }
        };
        pc["ecdh_config"] = json!({ "curve": curve });
    }
    if let Some((p1, eps)) = c.dppsi.filter(|_| dp) {
        let mut d = json!({});
        if let Some(p1) = p1 {
            d["bob_sub_sampling"] = json!(p1);
        }
        if let Some(eps) = eps {
            d["epsilon"] = json!(eps);
        }
        pc["dppsi_params"] = d;
    }
    Ok(psi_launch(c, pc, link, ext))
}

/// Where the server keeps its cache when the v1 config names `preprocess_path`.
///
/// In SecretFlow's v1 steps `preprocess_path` is the *client's* cache (transfer, offline,
/// online); its server writes nothing there (its online step needs only the key), so the
/// whitepaper's scripts give both parties one path and both may share a machine. Our server
/// keeps a cache of its own in every step, so it keeps it at `<preprocess_path>.server`, where
/// the client's cannot overwrite it. A step that only reads (transfer, online) takes
/// `preprocess_path` itself when no `.server` file exists beside it, which is where a server
/// cache made elsewhere (v2 `cache_path`, or `output_params.path` of gen cache) is pointed.
/// Returns the path and a note for the run's warnings saying which was taken.
fn server_cache_beside(given: &str, writes: bool, base_dir: &Path) -> (String, String) {
    let beside = format!("{given}.server");
    let take_beside = writes || base_dir.join(&beside).exists();
    let path = if take_beside {
        beside
    } else {
        given.to_string()
    };
    let note = format!(
        "{KEY}.preprocess_path: the server's cache is {path:?} (the client keeps its own at \
         {given:?}; SecretFlow's server keeps none there)"
    );
    (path, note)
}

/// The `ECDH_OPRF_UB_PSI_2PC_*` steps: a v2 `ub_psi_config`. Where SecretFlow keeps a file the
/// v1 way, it is accepted there too: the generated cache at `output_params.path` (gen cache) and
/// the server's cache at `input_params.path` (transfer cache), when `preprocess_path` is unset.
fn unbalanced(
    step: UbStep,
    c: &Common,
    link: Option<Value>,
    ext: Option<Value>,
    warnings: &mut Vec<String>,
    base_dir: &Path,
) -> Result<Value, ConfigError> {
    let self_id = c.self_link_party.clone();
    let field = |f: &str| format!("{KEY}.{f}");
    // The receiver is the client, except in shuffle online, where it is the server; gen cache
    // runs on the server alone, with or without a link.
    let server = match step {
        UbStep::GenCache => true,
        UbStep::ShuffleOnline => c.is_receiver()?,
        _ => !c.is_receiver()?,
    };
    if step != UbStep::GenCache && c.ids.len() != 2 {
        return Err(invalid(
            "link_config.parties",
            &format!(
                "has {} parties; unbalanced PSI needs exactly 2",
                c.ids.len()
            ),
        ));
    }
    c.warn_unused(PsiType::Ub(step), warnings);
    let mode = match step {
        UbStep::GenCache => "MODE_OFFLINE_GEN_CACHE",
        UbStep::TransferCache => "MODE_OFFLINE_TRANSFER_CACHE",
        UbStep::Offline => "MODE_OFFLINE",
        UbStep::Online | UbStep::ShuffleOnline => "MODE_ONLINE",
    };
    // Who learns the result: the receiver always, the other party with broadcast_result.
    let (server_gets, client_gets) = match step {
        UbStep::Online => (c.broadcast_result, true),
        UbStep::ShuffleOnline => (true, c.broadcast_result),
        _ => (false, false),
    };
    let learns = if server { server_gets } else { client_gets };
    // The server's cache beside preprocess_path (`server_cache_beside`), else where
    // SecretFlow keeps one (gen cache writes output_params.path, transfer reads
    // input_params.path).
    let mut beside = |writes: bool| {
        c.preprocess_path.as_ref().map(|given| {
            let (path, note) = server_cache_beside(given, writes, base_dir);
            warnings.push(note);
            path
        })
    };
    let cache = match (step, server) {
        (UbStep::GenCache, _) => beside(true).or_else(|| c.output.clone()),
        (UbStep::TransferCache, true) => beside(false).or_else(|| c.input.clone()),
        (UbStep::Offline, true) => beside(true),
        (UbStep::Online | UbStep::ShuffleOnline, true) => beside(false),
        _ => c.preprocess_path.clone(),
    };
    let Some(cache) = cache else {
        let why = match (step, server) {
            (UbStep::GenCache, _) => {
                "missing; the server writes its cache to <preprocess_path>.server (or, without \
                 preprocess_path, to output_params.path, SecretFlow's place for it)"
            }
            (UbStep::TransferCache, true) => {
                "missing; the server sends the cache from <preprocess_path>.server (or, without \
                 preprocess_path, from input_params.path, SecretFlow's place for it)"
            }
            (_, true) => {
                "missing; blindjoin's server keeps a cache of its own at \
                 <preprocess_path>.server (written by ECDH_OPRF_UB_PSI_2PC_GEN_CACHE or _OFFLINE \
                 with the same preprocess_path; preprocess_path itself is read when no .server \
                 file is beside it) and checks each query against it"
            }
            (_, false) => "missing; on the client it is where the transferred cache is kept",
        };
        return Err(invalid(&field("preprocess_path"), why));
    };
    let needs_input = match (step, server) {
        (UbStep::GenCache | UbStep::Offline, true) => true,
        (UbStep::Online | UbStep::ShuffleOnline, true) => learns,
        (UbStep::Online | UbStep::ShuffleOnline, false) => true,
        _ => false,
    };
    let mut ub = json!({
        "mode": mode,
        "role": if server { "ROLE_SERVER" } else { "ROLE_CLIENT" },
        "cache_path": cache,
        "server_get_result": server_gets,
        "client_get_result": client_gets,
        "disable_alignment": !c.need_sort,
    });
    if needs_input {
        ub["input_config"] = io(&c.input);
        ub["keys"] = json!(c.keys);
    }
    if learns {
        ub["output_config"] = io(&c.output);
    }
    if server && let Some(k) = &c.ecdh_secret_key_path {
        ub["server_secret_key_path"] = k.clone().into();
    } else if !server && c.ecdh_secret_key_path.is_some() {
        warnings.push(format!(
            "{KEY}.ecdh_secret_key_path: the server's key; ignored on the client"
        ));
    }
    let mut ext = ext;
    if let Some(curve) = &c.curve {
        let obj = ext.get_or_insert_with(|| json!({}));
        if let Some(given) = obj.get("curve").and_then(Value::as_str)
            && given != curve
        {
            return Err(invalid(
                &field("curve_type"),
                &format!("{curve}, but blindjoin.curve is {given}; give one of them"),
            ));
        }
        if let Some(o) = obj.as_object_mut() {
            o.insert("curve".into(), curve.clone().into());
        }
    }
    let (link, self_link) = if step == UbStep::GenCache {
        (None, None)
    } else {
        (link, self_id)
    };
    Ok(launch("ub_psi_config", ub, link, self_link.as_deref(), ext))
}

#[cfg(test)]
mod tests;
