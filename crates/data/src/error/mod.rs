mod csv;
use blindjoin_link::LinkError;
use blindjoin_protocols::ProtocolError;
pub use csv::CsvError;
use std::path::PathBuf;
use thiserror::Error;

/// Everything that can stop a run, sorted by what the user should look at.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DataError {
    /// The config file or flags are wrong; the message names the field.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The input table is malformed; the message names file, line and column.
    #[error(transparent)]
    Csv(#[from] CsvError),
    /// A key column named in `keys` is not in the file's header.
    #[error("{path}: no column named {column:?} (from `keys`); the header has: {available}")]
    MissingKeyColumn {
        /// The input file.
        path: PathBuf,
        /// The missing name.
        column: String,
        /// The names that exist.
        available: String,
    },
    /// A key cell is empty.
    #[error(
        "{path}:{line}: the key column {field:?} is empty; every row needs a key value (remove the row or fill it in)"
    )]
    EmptyKey {
        /// The input file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The key column.
        field: String,
    },
    /// A key cell is not valid UTF-8.
    #[error(
        "{path}:{line}: the key column {field:?} is not valid UTF-8 (byte {offset} of the value); convert the file to UTF-8"
    )]
    NonUtf8Key {
        /// The input file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The key column.
        field: String,
        /// Byte offset of the first bad byte in the value.
        offset: usize,
    },
    /// An input Parquet file cannot be read: it is not Parquet (a CSV file with a `.parquet`
    /// name), truncated, corrupt, or its column names cannot become a CSV header.
    #[error("{path}: {message}")]
    Parquet {
        /// The input file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A Parquet column has a type the data path cannot carry as text (nested, interval, …).
    #[error(
        "{path}: column {column:?} has type {data_type}, which blindjoin cannot read or write; supported: strings, binary, booleans, integers, floats, decimals, dates, times, timestamps, and dictionaries of these. Convert the column to one of them or drop it"
    )]
    UnsupportedParquetType {
        /// The Parquet file (input, or the output that would have had this column).
        path: PathBuf,
        /// The column.
        column: String,
        /// The column's Arrow type.
        data_type: String,
    },
    /// A key cell in a Parquet input is null.
    #[error(
        "{path}: row {row}: the key column {field:?} is null; every row needs a key value (drop the row or fill it in)"
    )]
    NullKey {
        /// The input file.
        path: PathBuf,
        /// 1-based row (the first data row is 1).
        row: u64,
        /// The key column.
        field: String,
    },
    /// A key cell in a Parquet input is the empty string (or empty binary).
    #[error(
        "{path}: row {row}: the key column {field:?} is empty; every row needs a key value (drop the row or fill it in)"
    )]
    EmptyParquetKey {
        /// The input file.
        path: PathBuf,
        /// 1-based row (the first data row is 1).
        row: u64,
        /// The key column.
        field: String,
    },
    /// The Parquet output could not be produced from the joined CSV rows: they are malformed,
    /// their header does not match the input's schema, or the Parquet encoder failed. Nothing
    /// is written.
    #[error("{path}: writing the Parquet output failed: {message}")]
    ParquetOutput {
        /// The output file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A joined cell does not parse as its column's type in the input's Parquet schema (the
    /// rows handed to the Parquet writer do not fit that schema). Nothing is written.
    #[error(
        "{path}: row {row}, column {column:?}: {value:?} is not a valid {expected} (the column's type in the input's Parquet schema), so the output cannot be written as Parquet"
    )]
    ParquetValue {
        /// The output file.
        path: PathBuf,
        /// 1-based output row (the first data row is 1).
        row: u64,
        /// The column.
        column: String,
        /// The cell's text (cut at 100 characters).
        value: String,
        /// The column's Arrow type.
        expected: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {action} failed: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What we were doing.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// `blindjoin.min_intersection`: the intersection is smaller than the minimum, so the run
    /// stopped after learning only its size.
    #[error(
        "the intersection has {found} keys, fewer than the {min} that blindjoin.min_intersection \
         requires; the run stopped after learning only that size: no output was written and \
         nothing else was revealed"
    )]
    IntersectionTooSmall {
        /// |X ∩ Y| in unique keys.
        found: u64,
        /// The minimum asked for.
        min: u64,
    },
    /// Labeled PSI: an input file (source table, query table, sender DB) cannot be used; the
    /// message names the file and, for a table, the line.
    #[error("{path}: {problem}")]
    ApsiInput {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// Labeled PSI: the receiver's plan asks for more OPRF evaluations than the sender DB's
    /// key has left under its cap (`crate::ub::budget`); refused before any is evaluated. The
    /// sender sends this message to the receiver as its reason.
    #[error(
        "refusing the receiver's plan of {asked} OPRF evaluations: the sender DB's key has \
         already evaluated {used} and blindjoin.max_query_items allows {cap} (count file: \
         {count_file}); the receiver can query fewer keys, the sender can raise \
         blindjoin.max_query_items or build a new DB (a new key; docs/config.md, key rotation)"
    )]
    ApsiQueryCap {
        /// The cap.
        cap: u64,
        /// Evaluations under this key before this session.
        used: u64,
        /// Evaluations the plan asks for (for this key).
        asked: u64,
        /// Where the count is kept.
        count_file: String,
    },
    /// Labeled PSI: the protocol layer refused; [`Fault::of_apsi`] sorts it.
    #[error("labeled PSI: {0}")]
    Apsi(#[from] blindjoin_apsi::ApsiError),
    /// The link to the peer failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The protocol failed (including a misbehaving peer or a settings mismatch).
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// Who must act to fix a failed run: the one decision both the CLI's exit code and the Python
/// exception classes are made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The config, flags or arguments are wrong (or the two parties' configs disagree in a way
    /// only this party's user can see): the message names the field.
    Config,
    /// An input file (table, key, certificate, cache) is missing, malformed or unsafe: the
    /// message names the file and where in it.
    Input,
    /// An output could not be written (disk full, permissions, a value the output format cannot
    /// hold).
    Output,
    /// The network: the peer could not be reached, the connection broke or timed out.
    Link,
    /// The peer: it aborted (with its reason), disagrees on a setting, or sent bad messages.
    Peer,
    /// The run stopped on purpose: cancelled (Ctrl-C), or a rule the user set
    /// (`blindjoin.min_intersection`).
    Stopped,
    /// A state that should not happen: please report it.
    Bug,
}

impl Fault {
    /// The CLI's exit code: 2 when the user's own config or input is at fault, 1 otherwise.
    pub fn exit_code(self) -> u8 {
        match self {
            Fault::Config | Fault::Input => 2,
            _ => 1,
        }
    }
}

impl Fault {
    /// The fault of a link error.
    pub fn of_link(e: &LinkError) -> Fault {
        match e {
            LinkError::TlsFile { .. } => Fault::Input,
            LinkError::TlsSetup(_) => Fault::Config,
            LinkError::PeerAborted { .. } => Fault::Peer,
            LinkError::Cancelled { .. } => Fault::Stopped,
            _ => Fault::Link,
        }
    }

    /// The fault of a labeled-PSI error.
    pub fn of_apsi(e: &blindjoin_apsi::ApsiError) -> Fault {
        use blindjoin_apsi::ApsiError as A;
        match e {
            // A preset APSI's rules refuse, or query keys that do not fit its table: the
            // params_file (config) must change.
            A::Params { .. } | A::Cuckoo { .. } => Fault::Config,
            // The receiver adopts the sender's preset only up to a cost; naming it in its own
            // params_file (config) is how to go past it.
            A::PeerParamsTooCostly { .. } => Fault::Config,
            // The data does not fit the preset (labels too long, too many items per bin).
            A::Input(_) | A::Db(_) => Fault::Input,
            A::PeerMisbehaved(_) | A::ParamsMismatch(_) => Fault::Peer,
            A::Link(l) => Fault::of_link(l),
            A::He(_) | A::Crypto(_) => Fault::Peer,
        }
    }

    /// The fault of a protocol error.
    pub fn of_protocol(e: &ProtocolError) -> Fault {
        match e {
            ProtocolError::Link(l) => Fault::of_link(l),
            ProtocolError::InvalidMessage(_)
            | ProtocolError::PeerMisbehaved(_)
            | ProtocolError::Mismatch { .. }
            | ProtocolError::Crypto(_) => Fault::Peer,
            ProtocolError::Config(_) | ProtocolError::Unsupported { .. } => Fault::Config,
            _ => Fault::Bug,
        }
    }
}

/// The file operations whose failure is the input's fault (a file the user gave us); every
/// other failed file operation is on our side of the run (temporary files, outputs).
const INPUT_ACTIONS: [&str; 5] = [
    "reading the input",
    "reading the secret key file",
    "reading the checkpoint",
    "resuming from the recovery folder",
    "keeping a row (rows of 4 GiB or more are not supported)",
];

impl DataError {
    /// Who must act; see [`Fault`].
    pub fn fault(&self) -> Fault {
        match self {
            DataError::Config(_) => Fault::Config,
            DataError::Csv(_)
            | DataError::MissingKeyColumn { .. }
            | DataError::EmptyKey { .. }
            | DataError::NonUtf8Key { .. }
            | DataError::Parquet { .. }
            | DataError::UnsupportedParquetType { .. }
            | DataError::NullKey { .. }
            | DataError::EmptyParquetKey { .. } => Fault::Input,
            DataError::ParquetOutput { .. } | DataError::ParquetValue { .. } => Fault::Output,
            DataError::Io { action, .. } if INPUT_ACTIONS.contains(action) => Fault::Input,
            DataError::Io { .. } => Fault::Output,
            DataError::IntersectionTooSmall { .. } => Fault::Stopped,
            DataError::ApsiInput { .. } => Fault::Input,
            // The receiver asks for more than the key may still answer: it must ask less.
            DataError::ApsiQueryCap { .. } => Fault::Peer,
            DataError::Apsi(a) => Fault::of_apsi(a),
            DataError::Link(l) => Fault::of_link(l),
            DataError::Protocol(p) => Fault::of_protocol(p),
        }
    }

    /// Whether the user's own config or input is at fault (exit code 2) rather than the run
    /// (link, peer, output: exit code 1).
    pub fn is_user_error(&self) -> bool {
        self.fault().exit_code() == 2
    }
}

/// A config problem, naming the field.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The JSON does not parse or has unknown fields / wrong types.
    #[error("{path}: {message}")]
    Syntax {
        /// The config file.
        path: String,
        /// serde's message, with the field path, line and column.
        message: String,
    },
    /// A field has a value we cannot use.
    #[error("{field}: {message}")]
    Invalid {
        /// Dotted field path, e.g. `psi_config.keys`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A field asks for a feature that is not built yet.
    #[error("{field} = {value} is not supported yet: {hint}")]
    NotYetSupported {
        /// Dotted field path.
        field: String,
        /// The value given.
        value: String,
        /// What to use instead.
        hint: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(action: &'static str) -> DataError {
        DataError::Io {
            path: PathBuf::from("f"),
            action,
            source: std::io::Error::other("x"),
        }
    }

    #[test]
    fn each_error_has_one_fault_and_exit_code() {
        let cases: Vec<(DataError, Fault)> = vec![
            (
                DataError::ApsiInput {
                    path: "sdb".into(),
                    problem: "checksum mismatch".into(),
                },
                Fault::Input,
            ),
            (
                DataError::Apsi(blindjoin_apsi::ApsiError::Cuckoo {
                    items: 300,
                    table_size: 256,
                }),
                Fault::Config,
            ),
            (
                DataError::Apsi(blindjoin_apsi::ApsiError::PeerParamsTooCostly {
                    ciphertexts: 2000,
                    bundle_indices: 100,
                    powers: 20,
                    cap: 1024,
                }),
                Fault::Config,
            ),
            (
                DataError::ApsiQueryCap {
                    cap: 5,
                    used: 3,
                    asked: 3,
                    count_file: "sdb.queries".into(),
                },
                Fault::Peer,
            ),
            (
                DataError::Apsi(blindjoin_apsi::ApsiError::PeerMisbehaved("x".into())),
                Fault::Peer,
            ),
            (
                DataError::Apsi(blindjoin_apsi::ApsiError::Input("label too long".into())),
                Fault::Input,
            ),
            (
                DataError::Config(ConfigError::Invalid {
                    field: "keys".into(),
                    message: "empty".into(),
                }),
                Fault::Config,
            ),
            (
                DataError::NullKey {
                    path: "a.parquet".into(),
                    row: 3,
                    field: "id".into(),
                },
                Fault::Input,
            ),
            (
                DataError::Parquet {
                    path: "a.parquet".into(),
                    message: "not parquet".into(),
                },
                Fault::Input,
            ),
            (io("reading the input"), Fault::Input),
            (io("reading the secret key file"), Fault::Input),
            (io("writing the output"), Fault::Output),
            (io("reading a spill shard"), Fault::Output),
            (
                DataError::Protocol(ProtocolError::PeerMisbehaved("x".into())),
                Fault::Peer,
            ),
            (
                DataError::Protocol(ProtocolError::Config("too many buckets".into())),
                Fault::Config,
            ),
            (
                DataError::Link(LinkError::PeerAborted {
                    peer: "p".into(),
                    reason: "r".into(),
                }),
                Fault::Peer,
            ),
            (
                DataError::Link(LinkError::Cancelled { reason: "r".into() }),
                Fault::Stopped,
            ),
            (
                DataError::IntersectionTooSmall { found: 1, min: 2 },
                Fault::Stopped,
            ),
            (
                DataError::Protocol(ProtocolError::Unreachable("x")),
                Fault::Bug,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.fault(), want, "{e}");
            assert_eq!(
                e.is_user_error(),
                matches!(want, Fault::Config | Fault::Input),
                "{e}"
            );
        }
    }
}
