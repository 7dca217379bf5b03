//! [`Envelope`]: a launch config, parsed once.
//!
//! SecretFlow's `LaunchConfig` holds one runtime config (`oneof runtime_config`:
//! `legacy_psi_config`, `psi_config`, `ub_psi_config`, `apsi_sender_config`,
//! `apsi_receiver_config`, `dk_pir_*`) beside `link_config`, `self_link_party` and our own
//! `blindjoin` block. The text is parsed into one JSON value here, once; each kind's parser
//! then deserializes its typed view from that value ([`Envelope::typed`]), and the kinds that
//! are written in terms of another (v1 → v2, three-party and n-party → two-party) hand it an
//! edited value ([`Envelope::derived`]), never text.
//!
//! A value has no positions, so a typed view's error is located in the text afterwards: the
//! field path serde reports is walked through the text ([`locate`]) to give the line and
//! column, as a parse of the text would.

use super::strip_trailing_commas;
use crate::error::ConfigError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The runtime configs of SecretFlow's `LaunchConfig`, in the order they are looked for.
pub(crate) const RUNTIME_CONFIGS: [&str; 7] = [
    "legacy_psi_config",
    "psi_config",
    "ub_psi_config",
    "apsi_sender_config",
    "apsi_receiver_config",
    "dk_pir_sender_config",
    "dk_pir_receiver_config",
];

/// A launch config: its one JSON value, where it came from, and the warnings parsing gave.
#[derive(Clone, Debug)]
pub struct Envelope {
    root: Value,
    /// The text as parsed (trailing commas blanked, every other byte in place), for positions.
    text: Arc<str>,
    source: String,
    base_dir: PathBuf,
    warnings: Vec<String>,
}

impl Envelope {
    /// Parses `text`; `source` names it in errors and warnings, relative paths resolve
    /// against `base_dir`. A trailing comma (SecretFlow's own docs have them) is a warning
    /// naming its line.
    ///
    /// # Errors
    /// Not JSON, or not a JSON object: with the line and column.
    pub fn parse(text: &str, source: &str, base_dir: &Path) -> Result<Envelope, ConfigError> {
        count_parse();
        let (cleaned, comma_lines) = strip_trailing_commas(text);
        let root: Value = serde_json::from_str(&cleaned).map_err(|e| ConfigError::Syntax {
            path: source.to_string(),
            message: e.to_string(),
        })?;
        if !root.is_object() {
            return Err(ConfigError::Syntax {
                path: source.to_string(),
                message: "expected a JSON object (SecretFlow's launch config) at line 1 column 1"
                    .into(),
            });
        }
        let warnings = comma_lines
            .iter()
            .map(|l| {
                format!("{source}:{l}: trailing comma ignored (strict JSON does not allow it)")
            })
            .collect();
        Ok(Envelope {
            root,
            text: cleaned.into(),
            source: source.to_string(),
            base_dir: base_dir.to_path_buf(),
            warnings,
        })
    }

    /// The same config with another value (a rewritten copy): the source, folder and
    /// warnings carry over, and so do positions for the paths the two share.
    pub(crate) fn derived(&self, root: Value) -> Envelope {
        Envelope {
            root,
            text: self.text.clone(),
            source: self.source.clone(),
            base_dir: self.base_dir.clone(),
            warnings: self.warnings.clone(),
        }
    }

    /// A rewritten copy whose warnings the caller already has (v1 → v2).
    pub(crate) fn rewritten(&self, root: Value) -> Envelope {
        Envelope {
            warnings: Vec::new(),
            ..self.derived(root)
        }
    }

    /// Sets one of our own fields (`"blindjoin": {name: value}`) as a flag given beside the
    /// config does (`--peer-wire`): the flag wins, and the parse checks it as if the file had it.
    ///
    /// # Errors
    /// `blindjoin` in the file is not an object.
    pub fn set_extension(&mut self, name: &str, value: Value) -> Result<(), ConfigError> {
        let ext = self.root.as_object_mut().map(|o| {
            o.entry("blindjoin")
                .or_insert_with(|| Value::Object(Default::default()))
        });
        match ext.and_then(Value::as_object_mut) {
            Some(e) => {
                e.insert(name.to_string(), value);
                Ok(())
            }
            None => Err(ConfigError::Invalid {
                field: "blindjoin".into(),
                message: "must be a JSON object".into(),
            }),
        }
    }

    /// The whole value.
    pub(crate) fn value(&self) -> &Value {
        &self.root
    }

    /// Whether the top level holds `key`.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.root.get(key).is_some()
    }

    /// The config's name in errors.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The folder relative paths resolve against.
    pub(crate) fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The warnings parsing gave (trailing commas), and those added by [`Envelope::warn`].
    pub(crate) fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Adds a warning for the run to print (a setting the config's source replaced).
    pub(crate) fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    /// SecretFlow's `oneof runtime_config`: the one runtime config this launch holds (`None`
    /// for none), or an error naming the second one and the first.
    ///
    /// # Errors
    /// Two runtime configs; DK-PIR, the one runtime config not built yet (named as such,
    /// whatever is beside it).
    pub(crate) fn runtime_config(&self) -> Result<Option<&'static str>, ConfigError> {
        for field in ["dk_pir_sender_config", "dk_pir_receiver_config"] {
            if self.has(field) {
                return Err(super::not_yet(
                    field,
                    "{...}",
                    "only psi_config, legacy_psi_config, ub_psi_config and the apsi configs run \
                     in this version",
                ));
            }
        }
        let mut present = RUNTIME_CONFIGS.iter().copied().filter(|k| self.has(k));
        match (present.next(), present.next()) {
            (Some(first), Some(second)) => Err(super::invalid(
                second,
                &format!(
                    "cannot be combined with {first}; a launch config holds one runtime config \
                     (SecretFlow's `oneof runtime_config`)"
                ),
            )),
            (first, _) => Ok(first),
        }
    }

    /// A typed view of a launch of one kind, whose runtime configs are `ours`. A launch with
    /// two runtime configs, or with another kind's, is refused here, naming the field, so a
    /// kind's type lists only its own runtime config (and an unknown key is still an error).
    ///
    /// # Errors
    /// As [`Envelope::runtime_config`] and [`Envelope::typed`]; another kind's runtime config.
    pub(crate) fn typed_kind<T: DeserializeOwned>(&self, ours: &[&str]) -> Result<T, ConfigError> {
        if let Some(theirs) = self.runtime_config()?
            && !ours.contains(&theirs)
        {
            return Err(super::invalid(
                theirs,
                &format!(
                    "a kind of run this parser does not read (it reads {}); \
                     blindjoin_data::Plan::from_config reads every kind, as `blindjoin run \
                     --config` and blindjoin.run do",
                    ours.join(" / ")
                ),
            ));
        }
        self.typed()
    }

    /// A typed view of the whole config.
    ///
    /// # Errors
    /// An unknown field or a value of the wrong type, naming the field's path, line and
    /// column.
    pub(crate) fn typed<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        serde_path_to_error::deserialize(&self.root).map_err(|e| {
            let segments: Vec<Seg> = e
                .path()
                .iter()
                .filter_map(|s| match s {
                    serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                    serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                    _ => None,
                })
                .collect();
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            let position = position_of(&self.text, &segments, &inner)
                .map(|(line, column)| format!(" at line {line} column {column}"))
                .unwrap_or_default();
            ConfigError::Syntax {
                path: self.source.clone(),
                message: if path == "." {
                    format!("{inner}{position}")
                } else {
                    format!("field `{path}`: {inner}{position}")
                },
            }
        })
    }
}

/// Where an error is: the value at `segments`, or for an unknown field, that field's key
/// inside it.
fn position_of(text: &str, segments: &[Seg], message: &str) -> Option<(usize, usize)> {
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_string());
    let mut path = segments.to_vec();
    // serde's path for an unknown field may or may not end with the field itself.
    if let Some(name) = unknown
        && path.last() != Some(&Seg::Key(name.clone()))
    {
        path.push(Seg::Key(name));
    }
    let offset = locate(text, &path).or_else(|| locate(text, segments))?;
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = offset
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
        + 1;
    Some((line, column))
}

/// One step of a path into a JSON value.
#[derive(Clone, Debug, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// The byte offset in `text` (valid JSON) of the value at `path`, or of its key when the
/// last step is a key; `None` if the path is not there.
fn locate(text: &str, path: &[Seg]) -> Option<usize> {
    let mut s = Scanner {
        b: text.as_bytes(),
        i: 0,
    };
    s.skip_ws();
    s.find(path)
}

/// A cursor over JSON text that skips values without building them.
struct Scanner<'t> {
    b: &'t [u8],
    i: usize,
}

impl Scanner<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// At the start of the value at the path's first step's parent: descends.
    fn find(&mut self, path: &[Seg]) -> Option<usize> {
        let Some((first, rest)) = path.split_first() else {
            return Some(self.i);
        };
        match (first, self.peek()?) {
            (Seg::Key(want), b'{') => {
                self.i += 1;
                loop {
                    self.skip_ws();
                    if self.peek()? == b'}' {
                        return None;
                    }
                    let key_at = self.i;
                    let key = self.string()?;
                    self.skip_ws();
                    if self.peek()? != b':' {
                        return None;
                    }
                    self.i += 1;
                    self.skip_ws();
                    if key == *want {
                        return if rest.is_empty() {
                            Some(key_at)
                        } else {
                            self.find(rest)
                        };
                    }
                    self.skip_value()?;
                    self.skip_ws();
                    if self.peek()? == b',' {
                        self.i += 1;
                    }
                }
            }
            (Seg::Index(want), b'[') => {
                self.i += 1;
                let mut n = 0;
                loop {
                    self.skip_ws();
                    if self.peek()? == b']' {
                        return None;
                    }
                    if n == *want {
                        return self.find(rest);
                    }
                    self.skip_value()?;
                    self.skip_ws();
                    if self.peek()? == b',' {
                        self.i += 1;
                    }
                    n += 1;
                }
            }
            _ => None,
        }
    }

    /// Reads a string token (escapes kept as written, which is enough to compare plain keys).
    fn string(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.i + 1;
        self.i += 1;
        while self.peek()? != b'"' {
            if self.peek()? == b'\\' {
                self.i += 1;
            }
            self.i += 1;
        }
        let s = std::str::from_utf8(&self.b[start..self.i])
            .ok()?
            .to_string();
        self.i += 1;
        Some(s)
    }

    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                // Valid JSON: brackets balance, whatever their kind.
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace() {
                        break;
                    }
                    self.i += 1;
                }
            }
        }
        Some(())
    }
}

#[cfg(test)]
thread_local! {
    static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts text parses in tests: a launch is parsed once ([`parses`]).
fn count_parse() {
    #[cfg(test)]
    PARSES.with(|p| p.set(p.get() + 1));
}

/// How many launch configs this thread has parsed from text (tests only).
#[cfg(test)]
pub(crate) fn parses() -> usize {
    PARSES.with(|p| p.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_located_in_the_text() {
        let text = "{\n  \"a\": { \"b\": [1, {\"c\": \"x\"}],\n  \"d\": true },\n  \"e\": 2\n}";
        let at = |p: &[Seg]| {
            let o = locate(text, p).unwrap();
            &text[o..o + 3]
        };
        assert_eq!(at(&[Seg::Key("e".into())]), "\"e\"");
        assert_eq!(at(&[Seg::Key("a".into()), Seg::Key("d".into())]), "\"d\"");
        assert_eq!(
            at(&[
                Seg::Key("a".into()),
                Seg::Key("b".into()),
                Seg::Index(1),
                Seg::Key("c".into())
            ]),
            "\"c\""
        );
        assert_eq!(locate(text, &[Seg::Key("zz".into())]), None);
        assert_eq!(
            position_of(
                text,
                &[Seg::Key("a".into())],
                "unknown field `d`, expected `b`"
            ),
            Some((3, 3))
        );
    }

    #[test]
    fn a_typed_view_names_the_field_and_its_line() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: Inner,
        }
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            n: u32,
        }
        let env = Envelope::parse(
            "{\n \"a\": {\n  \"n\": \"x\"\n }\n}",
            "t.json",
            Path::new("."),
        )
        .unwrap();
        let e = env.typed::<T>().unwrap_err().to_string();
        assert!(
            e.contains("t.json") && e.contains("a.n") && e.contains("line 3"),
            "{e}"
        );
        let env = Envelope::parse(
            "{\n \"a\": {\n  \"n\": 1,\n  \"m\": 2\n }\n}",
            "t.json",
            Path::new("."),
        )
        .unwrap();
        let e = env.typed::<T>().unwrap_err().to_string();
        assert!(
            e.contains("unknown field `m`") && e.contains("line 4"),
            "{e}"
        );
    }

    #[test]
    fn not_an_object_is_refused() {
        for text in ["[1]", "3", "{ not json"] {
            let e = Envelope::parse(text, "t.json", Path::new(".")).unwrap_err();
            assert!(
                e.to_string().contains("t.json") && e.to_string().contains("line 1"),
                "{e}"
            );
        }
    }
}
