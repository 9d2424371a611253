//! An `[[uplink]]`'s team keys: `devices = ["eth0", "eth1"]` with
//! `teaming`, `order`, `failback`, `lacp_rate` and `lacp_mode`, checked
//! into a [`Team`] (errors with the line of the key at fault).

use hvnet_port::team::lacp::{LacpMode, LacpRate};
use hvnet_port::team::policy::Teaming;

/// Most members a team has.
pub const MAX_MEMBERS: usize = 8;

/// The team keys of an `[[uplink]]` table, as written.
#[derive(Clone, Default)]
pub(super) struct TeamRepr {
    pub(super) devices: Option<toml::Spanned<Vec<String>>>,
    pub(super) teaming: Option<toml::Spanned<String>>,
    pub(super) order: Option<toml::Spanned<Vec<String>>>,
    pub(super) failback: Option<toml::Spanned<bool>>,
    pub(super) lacp_rate: Option<toml::Spanned<String>>,
    pub(super) lacp_mode: Option<toml::Spanned<String>>,
}

/// An uplink's team: several devices as one port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    /// The member devices, as written.
    pub devices: Vec<String>,
    /// The policy.
    pub teaming: Teaming,
    /// Member indices in the order they are used (the first usable is the
    /// active one: `active-backup`'s only member in use, the others' for
    /// broadcasts).
    pub order: Vec<usize>,
    /// Traffic goes back to a member usable again (default on).
    pub failback: bool,
    /// LACP's rate (default fast).
    pub lacp_rate: LacpRate,
    /// LACP's mode (default active).
    pub lacp_mode: LacpMode,
}

/// Where a key was written: its span's start, or `None` for the table's.
type At = Option<usize>;

fn at<T>(s: &toml::Spanned<T>) -> At {
    Some(s.span().start)
}

/// Checks the team keys; `Ok(None)` when there is no `devices` (a
/// single-device uplink, which may have none of the other keys either).
/// `ifname` says whether a device name is one the kernel takes.
pub(super) fn parse_team(
    r: &TeamRepr,
    ifname: impl Fn(&str) -> bool,
) -> Result<Option<Team>, (At, String)> {
    let Some(devices) = &r.devices else {
        let stray = [
            r.teaming.as_ref().map(|s| ("teaming", at(s))),
            r.order.as_ref().map(|s| ("order", at(s))),
            r.failback.as_ref().map(|s| ("failback", at(s))),
            r.lacp_rate.as_ref().map(|s| ("lacp_rate", at(s))),
            r.lacp_mode.as_ref().map(|s| ("lacp_mode", at(s))),
        ];
        if let Some((key, where_)) = stray.into_iter().flatten().next() {
            return Err((
                where_,
                format!("{key} is a team's key: give the uplink devices = [..] instead of device"),
            ));
        }
        return Ok(None);
    };
    let dat = at(devices);
    let list = devices.get_ref();
    if !(2..=MAX_MEMBERS).contains(&list.len()) {
        return Err((
            dat,
            format!(
                "devices has {} entries; a team has 2..{MAX_MEMBERS} (one device: device = \"..\")",
                list.len()
            ),
        ));
    }
    for (i, d) in list.iter().enumerate() {
        if !ifname(d) {
            return Err((dat, format!(
                "devices: {d:?} is not an interface name (1-15 characters of a-z, A-Z, 0-9, '-', '_', '.')"
            )));
        }
        if list[..i].contains(d) {
            return Err((dat, format!("devices: {d} is listed twice")));
        }
    }
    let teaming = match &r.teaming {
        None => Teaming::PortId,
        Some(t) => Teaming::from_word(t.get_ref()).ok_or_else(|| {
            (
                at(t),
                format!(
                    "teaming {:?} is not one of \"port-id\", \"source-mac\", \"ip-hash\", \"load-based\", \"active-backup\", \"lacp\"",
                    t.get_ref()
                ),
            )
        })?,
    };
    let order = match &r.order {
        None => (0..list.len()).collect(),
        Some(o) => {
            if !teaming.switch_independent() {
                return Err((at(o), format!(
                    "order: a {} team uses every member at once (order is for switch-independent policies)",
                    teaming.word()
                )));
            }
            let mut idx = Vec::new();
            for d in o.get_ref() {
                let Some(i) = list.iter().position(|x| x == d) else {
                    return Err((at(o), format!("order: {d} is not one of devices")));
                };
                if idx.contains(&i) {
                    return Err((at(o), format!("order: {d} is listed twice")));
                }
                idx.push(i);
            }
            if idx.len() != list.len() {
                return Err((at(o), "order: list every device of devices once".into()));
            }
            idx
        }
    };
    let lacp_only = |k: &str, s: &Option<toml::Spanned<String>>| match s {
        Some(s) if teaming != Teaming::Lacp => Err((
            at(s),
            format!(
                "{k} is for teaming = \"lacp\" (this team's is {:?})",
                teaming.word()
            ),
        )),
        _ => Ok(()),
    };
    lacp_only("lacp_rate", &r.lacp_rate)?;
    lacp_only("lacp_mode", &r.lacp_mode)?;
    let lacp_rate = match r.lacp_rate.as_ref().map(|s| (s.get_ref().as_str(), at(s))) {
        None | Some(("fast", _)) => LacpRate::Fast,
        Some(("slow", _)) => LacpRate::Slow,
        Some((o, w)) => {
            return Err((
                w,
                format!("lacp_rate {o:?} is not one of \"fast\", \"slow\""),
            ))
        }
    };
    let lacp_mode = match r.lacp_mode.as_ref().map(|s| (s.get_ref().as_str(), at(s))) {
        None | Some(("active", _)) => LacpMode::Active,
        Some(("passive", _)) => LacpMode::Passive,
        Some((o, w)) => {
            return Err((
                w,
                format!("lacp_mode {o:?} is not one of \"active\", \"passive\""),
            ))
        }
    };
    Ok(Some(Team {
        devices: list.clone(),
        teaming,
        order,
        failback: r.failback.as_ref().is_none_or(|f| *f.get_ref()),
        lacp_rate,
        lacp_mode,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::super::tests::GOOD;
    use super::*;

    fn team(keys: &str) -> Result<super::super::Topology, (usize, String)> {
        parse(&format!("{GOOD}\n[[uplink]]\nname = \"up0\"\n{keys}\n"))
            .map_err(|e| (e.line, e.to_string()))
    }

    #[test]
    fn a_team_is_read_with_its_policy_order_and_lacp_keys() {
        let t = team("devices = [\"ta\", \"tb\"]\nteaming = \"active-backup\"\norder = [\"tb\", \"ta\"]\nfailback = false").unwrap();
        let u = &t.uplinks[0];
        assert_eq!(u.device, "ta+tb");
        assert_eq!(u.devices(), vec!["ta", "tb"]);
        let tm = u.team.as_ref().unwrap();
        assert_eq!(
            (tm.teaming, tm.order.clone(), tm.failback),
            (Teaming::ActiveBackup, vec![1, 0], false)
        );
        let l = team("devices = [\"ta\", \"tb\"]\nteaming = \"lacp\"\nlacp_rate = \"slow\"\nlacp_mode = \"passive\"").unwrap();
        let tm = l.uplinks[0].team.clone().unwrap();
        assert_eq!(
            (tm.lacp_rate, tm.lacp_mode),
            (LacpRate::Slow, LacpMode::Passive)
        );
        let d = team("devices = [\"ta\", \"tb\"]").unwrap();
        let tm = d.uplinks[0].team.clone().unwrap();
        assert_eq!(
            (tm.teaming, tm.failback, tm.lacp_rate),
            (Teaming::PortId, true, LacpRate::Fast)
        );
        let single = team("device = \"ta\"").unwrap();
        assert!(single.uplinks[0].team.is_none(), "one device is no team");
    }

    #[test]
    fn bad_team_keys_are_refused_with_their_line_and_reason() {
        let bad = |keys: &str, why: &str, line: usize| {
            let (l, reason) = team(keys).unwrap_err();
            assert!(reason.contains(why), "{keys}: {reason}");
            assert_eq!(l, line, "{keys}: {reason}");
        };
        // GOOD ends on line 14; [[uplink]] is 16, name 17, the keys from 18.
        bad("devices = [\"ta\"]", "a team has 2..8", 18);
        bad("devices = [\"ta\", \"ta\"]", "listed twice", 18);
        bad("devices = [\"ta\", \"t/b\"]", "not an interface name", 18);
        bad(
            "devices = [\"ta\", \"tb\"]\nteaming = \"round-robin\"",
            "is not one of",
            19,
        );
        bad(
            "devices = [\"ta\", \"tb\"]\norder = [\"tc\"]",
            "tc is not one of devices",
            19,
        );
        bad(
            "devices = [\"ta\", \"tb\"]\norder = [\"ta\"]",
            "every device",
            19,
        );
        bad(
            "devices = [\"ta\", \"tb\"]\nteaming = \"lacp\"\norder = [\"ta\", \"tb\"]",
            "uses every member",
            20,
        );
        bad(
            "devices = [\"ta\", \"tb\"]\nlacp_rate = \"fast\"",
            "is for teaming = \"lacp\"",
            19,
        );
        bad(
            "devices = [\"ta\", \"tb\"]\nteaming = \"lacp\"\nlacp_mode = \"shy\"",
            "\"active\", \"passive\"",
            20,
        );
        bad("device = \"ta\"\nteaming = \"lacp\"", "is a team's key", 19);
        bad(
            "device = \"ta\"\ndevices = [\"ta\", \"tb\"]",
            "both given",
            18,
        );
        bad("queues = 1", "no device", 16);
        let two = parse(&format!(
            "{GOOD}\n[[uplink]]\nname = \"up0\"\ndevices = [\"ta\", \"tb\"]\n\n[[uplink]]\nname = \"up1\"\ndevice = \"tb\"\n"
        ));
        assert!(two
            .unwrap_err()
            .to_string()
            .contains("device tb has another uplink (up0)"));
        let vx =
            team("devices = [\"ta\", \"tb\"]\n[uplink.vxlan]\nvni = 7\nlocal = \"10.9.0.1/24\"");
        assert_eq!(
            vx.expect("a tunnel endpoint over a team").uplinks[0]
                .team
                .as_ref()
                .map(|t| t.devices.len()),
            Some(2)
        );
        let host = team("devices = [\"ta\", \"tb\"]\n\n[[host]]\nname = \"ext\"\nuplink = \"up0\"\nipv4 = \"10.1.0.100/24\"");
        assert!(host.unwrap_err().1.contains("is a team"));
    }
}
