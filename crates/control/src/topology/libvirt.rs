//! `[libvirt]`: the directory where libvirt's guests get their ports as
//! they start, and who may create sockets there. How the daemon follows
//! those guests is the `libvirt` module's.

use super::{line_of, ParseError, Section};
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
) -> Result<Option<Libvirt>, ParseError> {
    let Some(r) = repr else {
        return Ok(None);
    };
    let line = line_of(text, r.span().start);
    let bad = |reason: String| ParseError::at(line, Section::Libvirt, reason);
    let r = r.get_ref();
    let sockets = match &r.sockets {
        None => PathBuf::from(SOCKETS_ROOT).join(topology),
        Some(s) => {
            let p = PathBuf::from(s);
            // Its own directory: the switch sets its owner and mode and
            // removes sockets left in it.
            if !p.starts_with(SOCKETS_ROOT)
                || p == std::path::Path::new(SOCKETS_ROOT)
                || s.contains("..")
                || s.len() > 80
            {
                return Err(bad(format!("sockets {s:?} must be a directory under {SOCKETS_ROOT}, without '..', at most 80 characters (a socket's path, under it, has 108)")));
            }
            p
        }
    };
    let Some(gid) = super::vhost_socket::id_of(std::path::Path::new("/etc/group"), &r.group) else {
        return Err(bad(format!(
            "group {:?} is not a group on this host (libvirt's QEMU runs in libvirt-qemu)",
            r.group
        )));
    };
    if !["qemu:///system", "qemu:///session"].contains(&r.uri.as_str())
        && !r.uri.starts_with("qemu+unix:///system?socket=/")
    {
        return Err(bad(format!(
            "uri {:?}: qemu:///system (default), qemu:///session or qemu+unix:///system?socket=PATH",
            r.uri
        )));
    }
    Ok(Some(Libvirt {
        sockets,
        group: r.group.clone(),
        gid,
        uri: r.uri.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::refused;

    const VM: &str = "name = \"lv\"\n[[vm]]\nname = \"a\"\nipv4 = \"198.18.0.1/24\"\n";

    #[test]
    fn a_switch_of_libvirts_guests_and_its_directory() {
        // No [[vm]] at all: every port from libvirt.
        let t = parse("name = \"lv\"\n[libvirt]\ngroup = \"root\"\n").unwrap();
        let lv = t.libvirt.unwrap();
        assert_eq!(lv.sockets, std::path::Path::new("/run/hvnet-libvirt/lv"));
        assert_eq!((lv.gid, lv.uri.as_str()), (0, "qemu:///system"));
        assert!(refused("name = \"lv\"\n").1.contains("[libvirt]"));
        let bad = |table: &str, why: &str| {
            let (line, reason) = refused(&format!("{VM}[libvirt]\ngroup = \"root\"\n{table}"));
            assert!(reason.contains(why), "{table}: {reason}");
            assert_eq!(line, 5, "the [libvirt] table's line: {reason}");
        };
        bad("sockets = \"/run\"", "under /run/hvnet-libvirt");
        bad(
            "sockets = \"/run/hvnet-libvirt\"",
            "under /run/hvnet-libvirt",
        );
        bad("sockets = \"/run/hvnet-libvirt/../etc\"", "without '..'");
        bad("uri = \"xen:///\"", "qemu:///system");
        let (_, reason) = refused(&format!("{VM}[libvirt]\ngroup = \"no-such-group-here\"\n"));
        assert!(reason.contains("not a group on this host"), "{reason}");
        // A VM of the file may not put its socket where libvirt's go.
        let (_, reason) = refused(
            "name = \"lv\"\n[[vm]]\nname = \"g\"\nkind = \"vhost-user\"\nsocket = \"/run/hvnet-libvirt/lv/g.sock\"\n[libvirt]\ngroup = \"root\"\n",
        );
        assert!(reason.contains("libvirt's guests'"), "{reason}");
    }
}
