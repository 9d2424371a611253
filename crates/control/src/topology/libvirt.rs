//! `[libvirt]`: the directory where libvirt's guests get their ports as
//! they start, and who may create sockets there. How the daemon follows
//! those guests is the `libvirt` module's.

use super::line_of;
use serde::Deserialize;
use std::path::PathBuf;

/// `[libvirt]` as written in a topology file.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct LibvirtRepr {
    sockets: Option<String>,
    #[serde(default = "d_group")]
    group: String,
    #[serde(default = "d_uri")]
    uri: String,
}

fn d_group() -> String {
    "libvirt-qemu".into()
}

fn d_uri() -> String {
    "qemu:///system".into()
}

/// Where libvirt's guests find this switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Libvirt {
    /// The directory of their vhost-user sockets: a socket libvirt (or
    /// its QEMU, at a hot-plug) creates there is a guest's interface,
    /// which gets a port; one hvnet creates there is served to a
    /// `mode='client'` interface.
    pub sockets: PathBuf,
    /// The group that may create sockets there: QEMU's, which binds the
    /// socket of an interface hot-plugged with `mode='server'`.
    pub group: String,
    /// That group's id.
    pub gid: u32,
    /// The libvirt connection whose domains are looked up (read-only).
    pub uri: String,
}

/// The parent of every topology's default socket directory.
pub const SOCKETS_ROOT: &str = "/run/hvnet-libvirt";

/// `[libvirt]`, checked; errors carry its table's line.
pub(super) fn parse_libvirt(
    topology: &str,
    text: &str,
    repr: Option<&toml::Spanned<LibvirtRepr>>,
) -> Result<Option<Libvirt>, (usize, String)> {
    let Some(r) = repr else {
        return Ok(None);
    };
    let line = line_of(text, r.span().start);
    let r = r.get_ref();
    let sockets = match &r.sockets {
        None => PathBuf::from(SOCKETS_ROOT).join(topology),
        Some(s) => {
            let p = PathBuf::from(s);
            if !p.is_absolute() || s.contains("..") || s.len() > 80 {
                return Err((
                    line,
                    format!("libvirt: sockets {s:?} must be an absolute directory path without '..', at most 80 characters (a socket's path, under it, has 108)"),
                ));
            }
            p
        }
    };
    let Some(gid) = super::vhost_socket::id_of(std::path::Path::new("/etc/group"), &r.group) else {
        return Err((
            line,
            format!(
                "libvirt: group {:?} is not a group on this host (libvirt's QEMU runs in libvirt-qemu)",
                r.group
            ),
        ));
    };
    if !["qemu:///system", "qemu:///session"].contains(&r.uri.as_str())
        && !r.uri.starts_with("qemu+unix:///system?socket=/")
    {
        return Err((
            line,
            format!(
                "libvirt: uri {:?}: qemu:///system (default), qemu:///session or qemu+unix:///system?socket=PATH",
                r.uri
            ),
        ));
    }
    Ok(Some(Libvirt {
        sockets,
        group: r.group.clone(),
        gid,
        uri: r.uri.clone(),
    }))
}
