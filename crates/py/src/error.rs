//! The one place where Rust errors become Python exceptions.
//!
//! `blindjoin.Error` is the base; each subclass is one [`Fault`] (who must act), the same
//! decision the CLI's exit code is made from. The message is always the Rust error's `Display`, the same text the CLI prints.

use blindjoin_data::ub::UbError;
use blindjoin_data::{ConfigError as RsConfigError, DataError, Fault};
use blindjoin_link::LinkError as RsLinkError;
use blindjoin_protocols::ProtocolError as RsProtocolError;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyKeyboardInterrupt};
use pyo3::prelude::*;

pyo3::create_exception!(
    blindjoin,
    Error,
    PyException,
    "Base class of every error blindjoin raises (except FileNotFoundError for a missing input)."
);
pyo3::create_exception!(
    blindjoin,
    ConfigError,
    Error,
    "The config or arguments are wrong; the message names the field."
);
pyo3::create_exception!(
    blindjoin,
    InputError,
    Error,
    "The input table is malformed or lacks a key column; the message names file, line and column."
);
pyo3::create_exception!(
    blindjoin,
    OutputError,
    Error,
    "An output could not be written (disk full, permissions, a value the output format cannot \
     hold); the message names the file."
);
pyo3::create_exception!(
    blindjoin,
    LinkError,
    Error,
    "The network link failed: cannot listen, peer not reachable in time, connection lost, timeout."
);
pyo3::create_exception!(
    blindjoin,
    PeerError,
    Error,
    "The peer failed (it aborted with a reason), disagrees on settings, or misbehaved."
);
pyo3::create_exception!(
    blindjoin,
    ProtocolError,
    Error,
    "The protocol failed locally (curve error, unsupported option, internal error)."
);

pyo3::create_exception!(
    blindjoin,
    CacheError,
    Error,
    "An unbalanced-PSI cache or key file is missing, damaged, stale or unsafe, or the server's \
     input changed since its cache was made; the message names the file and the fix."
);

/// Maps a config error (from parsing a launch config).
pub(crate) fn config_err(e: &RsConfigError) -> PyErr {
    ConfigError::new_err(e.to_string())
}

/// The exception class of a [`Fault`]: the same decision the CLI's exit code is made from.
fn class_of(fault: Fault, msg: String) -> PyErr {
    match fault {
        Fault::Config => ConfigError::new_err(msg),
        Fault::Input => InputError::new_err(msg),
        Fault::Output => OutputError::new_err(msg),
        Fault::Link => LinkError::new_err(msg),
        Fault::Peer => PeerError::new_err(msg),
        // Only a cancel through a CancelToken gets here (Ctrl-C re-raises its own interrupt).
        Fault::Stopped => Error::new_err(msg),
        Fault::Bug => ProtocolError::new_err(msg),
    }
}

/// Whether `e` is a cancel (raised as `KeyboardInterrupt`).
fn cancelled(e: &DataError) -> bool {
    matches!(
        e,
        DataError::Link(RsLinkError::Cancelled { .. })
            | DataError::Protocol(RsProtocolError::Link(RsLinkError::Cancelled { .. }))
    )
}

/// Maps an error from `blindjoin_data::run`.
pub(crate) fn data_err(e: &DataError) -> PyErr {
    let msg = e.to_string();
    match e {
        DataError::Io { source, .. }
            if e.fault() == Fault::Input && source.kind() == std::io::ErrorKind::NotFound =>
        {
            PyFileNotFoundError::new_err(msg)
        }
        _ if cancelled(e) => PyKeyboardInterrupt::new_err(msg),
        _ => class_of(e.fault(), msg),
    }
}

/// Maps an error from `blindjoin_data::ub::run_ub`.
pub(crate) fn ub_err(e: &UbError) -> PyErr {
    match e {
        UbError::Data(d) => data_err(d),
        UbError::Cache { .. } | UbError::KeyFile { .. } | UbError::InputChanged { .. } => {
            CacheError::new_err(e.to_string())
        }
        _ => class_of(e.fault(), e.to_string()),
    }
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("LinkError", py.get_type::<LinkError>())?;
    m.add("PeerError", py.get_type::<PeerError>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("CacheError", py.get_type::<CacheError>())?;
    Ok(())
}
