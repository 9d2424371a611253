//! `[ipfix]`: flow export, in Open vSwitch's words (its `IPFIX` table;
//! docs/guide/capture.md).
//!
//! ```toml
//! [ipfix]
//! targets = ["198.18.5.2:4739"]  # collectors, UDP
//! sampling = 1                   # 1 in N frames metered (1: every frame)
//! obs_domain_id = 1              # the observation domain the messages say
//! cache_active_timeout = 60      # seconds: a flow's record sent while it goes on
//! cache_idle_timeout = 15        # seconds: a flow idle this long has its record sent
//! cache_max_flows = 65536        # flows held at most
//! ```

use super::{line_of, ParseError, Section};
use hvnet_datapath::ipfix::IpfixConfig;
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// Most flows a cache may be told to hold (some 100 bytes each).
pub const MAX_FLOWS: i64 = 1 << 22;

/// `[ipfix]` as written.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct IpfixRepr {
    targets: Vec<String>,
    #[serde(default = "one")]
    sampling: i64,
    #[serde(default)]
    obs_domain_id: i64,
    #[serde(default = "d_active")]
    cache_active_timeout: i64,
    #[serde(default = "d_idle")]
    cache_idle_timeout: i64,
    #[serde(default = "d_flows")]
    cache_max_flows: i64,
}

fn one() -> i64 {
    1
}
fn d_active() -> i64 {
    60
}
fn d_idle() -> i64 {
    15
}
fn d_flows() -> i64 {
    65_536
}

pub(super) fn parse_ipfix(
    text: &str,
    repr: Option<&toml::Spanned<IpfixRepr>>,
) -> Result<Option<IpfixConfig>, ParseError> {
    let Some(r) = repr else {
        return Ok(None);
    };
    let line = line_of(text, r.span().start);
    let f = r.get_ref();
    let fail = |why: String| ParseError::at(line, Section::Ipfix, why);
    if f.targets.is_empty() {
        return Err(fail(
            "targets: at least one collector, as \"198.18.5.2:4739\"".into(),
        ));
    }
    let targets = f
        .targets
        .iter()
        .map(|t| {
            t.parse::<SocketAddr>().map_err(|_| {
                fail(format!(
                    "targets: {t:?} is not ADDRESS:PORT (\"198.18.5.2:4739\", \"[fd00::2]:4739\")"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if targets.iter().any(|t| t.is_ipv4() != targets[0].is_ipv4()) {
        return Err(fail(
            "targets: all IPv4 or all IPv6 (the exporter has one socket)".into(),
        ));
    }
    let range = |name: &str, v: i64, lo: i64, hi: i64| {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(fail(format!("{name} = {v}: {name} takes {lo}..{hi}")))
        }
    };
    Ok(Some(IpfixConfig {
        targets,
        sampling: range("sampling", f.sampling, 1, 1 << 24)? as u32,
        obs_domain_id: range("obs_domain_id", f.obs_domain_id, 0, u32::MAX.into())? as u32,
        cache_active_timeout: Duration::from_secs(range(
            "cache_active_timeout",
            f.cache_active_timeout,
            1,
            3600,
        )? as u64),
        cache_idle_timeout: Duration::from_secs(range(
            "cache_idle_timeout",
            f.cache_idle_timeout,
            1,
            3600,
        )? as u64),
        cache_max_flows: range("cache_max_flows", f.cache_max_flows, 1, MAX_FLOWS)? as usize,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::{refused, GOOD};

    #[test]
    fn ipfix_is_read_with_its_defaults_and_bad_values_are_refused() {
        let t = parse(&format!(
            "{GOOD}\n[ipfix]\ntargets = [\"198.18.5.2:4739\"]\nsampling = 10\n"
        ))
        .unwrap();
        let c = t.ipfix.unwrap();
        assert_eq!(
            (
                c.sampling,
                c.cache_max_flows,
                c.cache_idle_timeout.as_secs()
            ),
            (10, 65_536, 15)
        );
        for (keys, says) in [
            ("targets = []", "at least one"),
            (
                "targets = [\"198.18.5.2:4739\", \"[fd00::2]:4739\"]",
                "all IPv4 or all IPv6",
            ),
            ("targets = [\"198.18.5.2\"]", "ADDRESS:PORT"),
            (
                "targets = [\"198.18.5.2:4739\"]\nsampling = 0",
                "sampling takes 1..",
            ),
            (
                "targets = [\"198.18.5.2:4739\"]\ncache_max_flows = 0",
                "cache_max_flows takes",
            ),
        ] {
            let (_, why) = refused(&format!("{GOOD}\n[ipfix]\n{keys}\n"));
            assert!(why.contains(says), "{keys}: {why}");
        }
    }
}
