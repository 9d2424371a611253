//! Addresses delegated to an IPAM plugin (`host-local`, `static`,
//! `dhcp`, …), run as the spec says: found in `CNI_PATH`, with this call's
//! environment but its own verb, the configuration as it came on
//! standard input, its error passed on.

use crate::env::{Command, Env};
use crate::error::{code, CniError};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

/// What an IPAM plugin gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Leases {
    /// Addresses with their prefix, and the gateway of each's subnet.
    pub ips: Vec<(std::net::IpAddr, u8, Option<std::net::IpAddr>)>,
    /// Routes: destination, prefix, gateway.
    pub routes: Vec<(std::net::IpAddr, u8, Option<std::net::IpAddr>)>,
    /// `dns`, as it gave it.
    pub dns: Option<Value>,
}

/// Runs IPAM plugin `kind` for `verb` with `stdin`; its result for ADD
/// (`None` for the other verbs, which print nothing when they succeed).
///
/// A plugin older than the configuration (Debian 12's `host-local` speaks
/// up to 1.0.0, a configuration says 1.1.0) refuses it with error 1; it
/// is then asked again in the newest version it speaks that is older
/// than the configuration's, as its result reads the same to hvnet-cni.
pub fn run(env: &Env, kind: &str, verb: Command, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    match run_once(env, kind, verb, stdin) {
        Err(e) if e.code == code::INCOMPATIBLE_VERSION => match older(env, kind, stdin) {
            Some(again) => run_once(env, kind, verb, &again),
            None => Err(e),
        },
        r => r,
    }
}

/// The configuration in the newest CNI version IPAM plugin `kind` speaks
/// below its own, if it speaks one.
fn older(env: &Env, kind: &str, stdin: &[u8]) -> Option<Vec<u8>> {
    let mut conf: Value = serde_json::from_slice(stdin).ok()?;
    let want = version(conf["cniVersion"].as_str()?)?;
    let best = supported(env, kind)
        .into_iter()
        .filter_map(|v| Some((version(&v)?, v)))
        .filter(|(n, _)| *n < want)
        .max()?;
    conf["cniVersion"] = Value::String(best.1);
    serde_json::to_vec(&conf).ok()
}

/// `MAJOR.MINOR.PATCH` as numbers, to compare.
fn version(s: &str) -> Option<(u32, u32, u32)> {
    let mut n = s.split('.').map(|x| x.parse().ok());
    Some((n.next()??, n.next()??, n.next().unwrap_or(Some(0))?))
}

fn run_once(env: &Env, kind: &str, verb: Command, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    let bin = find(env, kind)?;
    let mut child = Process::new(&bin)
        .env("CNI_COMMAND", verb.name())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            CniError::new(
                code::IPAM_FAILED,
                format!("cannot run the IPAM plugin {kind}"),
                format!("{}: {e}", bin.display()),
            )
        })?;
    if let Some(mut i) = child.stdin.take() {
        // A plugin that exits without reading its input is judged by its
        // exit, not by the broken pipe.
        let _ = i.write_all(stdin);
    }
    let out = child.wait_with_output().map_err(|e| {
        CniError::new(
            code::IPAM_FAILED,
            format!("the IPAM plugin {kind} failed"),
            e.to_string(),
        )
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let c = v["code"].as_u64().map_or(code::IPAM_FAILED, |c| c as u32);
        let msg = v["msg"].as_str().unwrap_or("failed");
        let details = v["details"].as_str().unwrap_or(text.trim());
        return Err(CniError::new(
            c,
            format!("IPAM plugin {kind}: {msg}"),
            details,
        ));
    }
    if verb != Command::Add {
        return Ok(None);
    }
    serde_json::from_str(&text).map(Some).map_err(|e| {
        CniError::new(
            code::IPAM_FAILED,
            format!("IPAM plugin {kind}: its result is not JSON"),
            e.to_string(),
        )
    })
}

/// True if IPAM plugin `kind` speaks CNI `version` (its VERSION answer):
/// GC and STATUS go only to one that knows them (a plugin built before
/// CNI 1.1 takes them for a call without a container).
pub fn speaks(env: &Env, kind: &str, version: &str) -> bool {
    supported(env, kind).iter().any(|v| v == version)
}

/// The CNI versions IPAM plugin `kind` says it speaks (none if it cannot
/// be asked).
fn supported(env: &Env, kind: &str) -> Vec<String> {
    let Ok(bin) = find(env, kind) else {
        return Vec::new();
    };
    let out = Process::new(&bin)
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    out.ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .and_then(|v| {
            v["supportedVersions"].as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The IPAM plugin's binary: the first `kind` in `CNI_PATH`.
fn find(env: &Env, kind: &str) -> Result<PathBuf, CniError> {
    env.path
        .iter()
        .map(|d| d.join(kind))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                format!("no IPAM plugin {kind}"),
                format!(
                    "not in CNI_PATH ({})",
                    env.path
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(":")
                ),
            )
        })
}

/// Reads an ADD result's addresses, routes and DNS (any version's shape).
pub fn leases(result: &Value) -> Result<Leases, CniError> {
    let bad = |what: String| CniError::new(code::IPAM_FAILED, "the IPAM plugin's result", what);
    let mut l = Leases {
        dns: result
            .get("dns")
            .cloned()
            .filter(|d| d.as_object().is_some_and(|o| !o.is_empty())),
        ..Leases::default()
    };
    for ip in result["ips"].as_array().into_iter().flatten() {
        let a = ip["address"]
            .as_str()
            .ok_or_else(|| bad(format!("{ip}: no address")))?;
        let (addr, prefix) =
            cidr(a).ok_or_else(|| bad(format!("address {a:?} is not ADDRESS/PREFIX")))?;
        let gw = match ip.get("gateway").and_then(Value::as_str) {
            Some(g) => Some(
                g.parse()
                    .map_err(|_| bad(format!("gateway {g:?} is not an address")))?,
            ),
            None => None,
        };
        l.ips.push((addr, prefix, gw));
    }
    if l.ips.is_empty() {
        return Err(bad("it gave no address".into()));
    }
    for r in result["routes"].as_array().into_iter().flatten() {
        let d = r["dst"]
            .as_str()
            .ok_or_else(|| bad(format!("route {r}: no dst")))?;
        let (dst, prefix) =
            cidr(d).ok_or_else(|| bad(format!("route dst {d:?} is not ADDRESS/PREFIX")))?;
        let gw = match r.get("gw").and_then(Value::as_str) {
            Some(g) => Some(
                g.parse()
                    .map_err(|_| bad(format!("route gw {g:?} is not an address")))?,
            ),
            // No gateway: the gateway of the address of its family, as
            // the reference plugins do.
            None => l
                .ips
                .iter()
                .find(|(a, _, _)| a.is_ipv4() == dst.is_ipv4())
                .and_then(|i| i.2),
        };
        l.routes.push((dst, prefix, gw));
    }
    Ok(l)
}

/// `ADDRESS/PREFIX`.
fn cidr(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (a, p) = s.split_once('/')?;
    let a: std::net::IpAddr = a.parse().ok()?;
    let p: u8 = p.parse().ok()?;
    (p <= if a.is_ipv4() { 32 } else { 128 }).then_some((a, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert!(version("1.1.0") > version("1.0.0"));
        assert!(version("0.10.0") > version("0.4.0"));
        assert_eq!(version("1.0"), Some((1, 0, 0)));
        assert_eq!(version("one"), None);
    }

    #[test]
    fn a_host_local_result_gives_addresses_gateways_and_routes() {
        let r: Value = serde_json::from_str(
            r#"{"cniVersion":"1.0.0","ips":[{"address":"198.18.177.2/24","gateway":"198.18.177.1"}],
                "routes":[{"dst":"0.0.0.0/0"},{"dst":"198.19.0.0/16","gw":"198.18.177.254"}],"dns":{}}"#,
        )
        .unwrap();
        let l = leases(&r).unwrap();
        assert_eq!(l.ips.len(), 1);
        assert_eq!(l.routes[0].2, Some("198.18.177.1".parse().unwrap()));
        assert_eq!(l.routes[1].1, 16);
        assert!(l.dns.is_none());
        assert!(leases(&serde_json::json!({"ips": []})).is_err());
        assert!(leases(&serde_json::json!({"ips": [{"address": "198.18.0.1"}]})).is_err());
    }
}
