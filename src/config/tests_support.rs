//! Helpers shared by the tests of several of the config files: resolving
//! with no environment, or with a given one.

use super::{Config, ConfigError, RawConfig, resolve};

pub(super) fn no_env(_: &str) -> Option<String> {
    None
}

/// Resolves with the environment `vars` (name, value).
pub(super) fn with_env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resolve(&RawConfig::default(), &move |k| {
        vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
}
