//! Reading settings from the environment: what every owner of a configuration section uses
//! to read and check its variables, so that a bad value stops the process with one kind of
//! message (`invalid NAME="value": what it expects`). Each section is read through a lookup
//! (`get`: the environment, or a map in tests) that treats a blank value as unset.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// A variable that is set but unusable; the message names it and says what it expects.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid {name}={value:?}: {expected}")]
pub struct ConfigError {
    /// The variable's name.
    pub name: &'static str,
    /// What it was set to.
    pub value: String,
    /// What it should be.
    pub expected: String,
}

/// A secret setting (an API key): used, never shown — its `Debug` is `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret read from the environment.
    pub fn new(secret: String) -> Self {
        Self(secret)
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A lookup over fixed `(name, value)` pairs instead of the environment: what tests and
/// tools pass to a section's `from_lookup`.
pub fn pairs<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name: &str| {
        (vars.iter())
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    }
}

/// The process environment as every section reads it: a blank value is unset.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `SLUICE_HOME`: where setup puts downloads, models and tools (default `~/.cache/sluice`).
pub fn home(get: &impl Fn(&str) -> Option<String>) -> PathBuf {
    get("SLUICE_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(get("HOME").unwrap_or_else(|| ".".into())).join(".cache/sluice")
    })
}

/// `SLUICE_MODEL_DIR`: the embedding model's package — the model and its tokenizer
/// (`sluice-embed`), and the cache guard's lexicon beside them (default
/// `models/all-MiniLM-L6-v2` under [`home`]).
pub fn model_dir(get: &impl Fn(&str) -> Option<String>) -> PathBuf {
    get("SLUICE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| home(get).join("models/all-MiniLM-L6-v2"))
}

/// Whether `url` is an http:// or https:// URL.
pub fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

/// The value of `name` among `choices` (the first is the default), or an error listing them.
pub fn one_of<T: Copy>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    choices: &[(&str, T)],
) -> Result<T, ConfigError> {
    let Some(value) = get(name) else {
        return Ok(choices[0].1);
    };
    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
    choices
        .iter()
        .find(|(n, _)| *n == value.trim())
        .map(|(_, v)| *v)
        .ok_or_else(|| ConfigError {
            name,
            value: value.trim().to_string(),
            expected: match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => names.join(""),
            },
        })
}

/// The value of `name` parsed (its default when unset), or an error saying what was expected.
pub fn parse<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: &str,
    expected: &str,
) -> Result<T, ConfigError> {
    let value = get(name).unwrap_or_else(|| default.to_string());
    value.trim().parse().map_err(|_| ConfigError {
        name,
        value,
        expected: expected.to_string(),
    })
}

/// `value` as a URL without a trailing slash; a bare host (as Pinecone's console shows it)
/// means https.
pub fn https_url(value: &str) -> String {
    let value = value.trim().trim_end_matches('/');
    if value.starts_with("http://") || value.starts_with("https://") {
        value.to_string()
    } else {
        format!("https://{value}")
    }
}

/// A whole number from `min` to `max` (`default` when unset).
pub fn ranged(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    let expected = format!("a whole number from {min} to {max}");
    let n: usize = parse(get, name, &default.to_string(), &expected)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(ConfigError {
            name,
            value: n.to_string(),
            expected,
        })
    }
}

/// A duration in milliseconds, at least `min` and at most an hour (`default` when unset).
pub fn millis(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u64,
    min: u64,
) -> Result<Duration, ConfigError> {
    let n = ranged(get, name, default as usize, min as usize, 3_600_000)?;
    Ok(Duration::from_millis(n as u64))
}
