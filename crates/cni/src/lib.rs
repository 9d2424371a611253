//! `hvnet-cni`: a CNI plugin (spec 1.1, and 0.3.x, 0.4.0 and 1.0.0
//! configurations) that puts a container on a running hvnet switch. It is
//! a thin client of the topology's control socket: the switch makes the
//! port — a TAP inside the container's namespace under the name the
//! runtime asks for, with the addresses and routes the IPAM plugin gave —
//! and the plugin never starts a switch. docs/guide/containers.md says how
//! podman, containerd and a kubelet use it.

pub mod config;
pub mod env;
pub mod error;
pub mod ipam;
pub mod name;
pub mod result;
pub mod switch;
pub mod verbs;

use config::{NetConf, VERSIONS};
use env::{Command, Env};
use error::CniError;
use serde_json::{json, Value};

/// One call: the environment, standard input; what to print on standard
/// output, and whether it succeeded.
pub fn run(var: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> (Option<Value>, bool) {
    // VERSION needs no configuration, and no switch.
    if var("CNI_COMMAND").as_deref() == Some("VERSION") {
        let asked = serde_json::from_slice::<Value>(stdin)
            .ok()
            .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
            .filter(|v| VERSIONS.contains(&v.as_str()))
            .unwrap_or_else(|| "1.1.0".into());
        return (
            Some(json!({"cniVersion": asked, "supportedVersions": VERSIONS})),
            true,
        );
    }
    let version = serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .unwrap_or_else(|| "1.1.0".into());
    match call(var, stdin) {
        Ok(out) => (out, true),
        Err(e) => (Some(e.to_json(&version)), false),
    }
}

fn call(var: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    let env = Env::read(var)?;
    let conf = NetConf::parse(stdin)?;
    if !conf.allows(env.command) {
        return Err(CniError::new(
            error::code::INCOMPATIBLE_VERSION,
            format!("config version does not allow {}", env.command.name()),
            format!(
                "cniVersion {} has no {} (CHECK came with 0.4.0, GC and STATUS with 1.1.0)",
                conf.version,
                env.command.name()
            ),
        ));
    }
    match env.command {
        Command::Add => verbs::add(&env, &conf, stdin).map(Some),
        Command::Del => verbs::del(&env, &conf, stdin).map(|()| None),
        Command::Check => verbs::check(&env, &conf, stdin).map(|()| None),
        Command::Gc => verbs::gc(&env, &conf, stdin).map(|()| None),
        Command::Status => verbs::status(&env, &conf, stdin).map(|()| None),
        Command::Version => unreachable!("answered before the configuration is read"),
    }
}
