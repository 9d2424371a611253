//! A `port set` request's changes read into a port's settings: every key
//! known, every value of its setting's kind, errors in the CLI's words.

use crate::proto::CtlError;
use hvnet_datapath::rate::{parse_burst, parse_rate};
use hvnet_datapath::settings::{setting_range, SettingError};
use hvnet_datapath::{PortSettings, VlanSet};
use serde_json::{json, Value};

/// A port's settings with `changes` (a `port set` request's, JSON) applied:
/// every key known, every value of its setting's kind, or an error that
/// names the field and what it takes. Nothing is applied here; the caller
/// checks ranges against the switch before changing anything.
pub fn merge_settings(cur: &PortSettings, changes: Value) -> Result<PortSettings, CtlError> {
    let mut cur = serde_json::to_value(cur).expect("settings serialize");
    let Value::Object(ch) = changes else {
        return Err(CtlError::BadRequest {
            reason: "changes must be an object".into(),
        });
    };
    let asked: Vec<String> = ch.keys().cloned().collect();
    for (k, v) in ch {
        let Some(now) = cur.get(&k) else {
            // (A VM's access VLAN, `vlan`, is taken before the settings.)
            let mut allowed: Vec<String> = cur
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect();
            allowed.push(VLAN.into());
            allowed.sort();
            return Err(CtlError::UnknownSetting {
                setting: k,
                allowed,
            });
        };
        // Each value's kind checked here, named in the CLI's words.
        let shown = match &v {
            Value::Bool(b) => if *b { "on" } else { "off" }.to_string(),
            Value::String(w) => w.clone(),
            other => other.to_string(),
        };
        let bad = |allowed: String| CtlError::BadValue {
            setting: k.clone(),
            value: shown.clone(),
            allowed,
        };
        // A trunk's VLANs: a list as an operator writes it (one number
        // is a list too); its native VLAN: a number, or none.
        match (k.as_str(), &v) {
            ("vlans", Value::Number(_) | Value::String(_)) => {
                VlanSet::parse(&shown)
                    .map_err(|e| bad(format!("VLAN ids and low-high ranges ({e})")))?;
                cur[&k] = json!(shown);
                continue;
            }
            ("vlans", _) => return Err(bad(allowed(&k))),
            ("native_vlan", Value::String(w)) if w == "none" => {
                cur[&k] = Value::Null;
                continue;
            }
            ("native_vlan", Value::Number(n)) if n.as_u64() == Some(0) => {
                cur[&k] = Value::Null;
                continue;
            }
            ("native_vlan", Value::Number(_)) => {
                if let (Some((_, max)), Some(n)) = (setting_range(&k), v.as_u64()) {
                    if n > max {
                        return Err(bad(allowed(&k)));
                    }
                }
                cur[&k] = v;
                continue;
            }
            ("native_vlan", _) => return Err(bad(allowed(&k))),
            // Rates and bursts: as tc writes them, or off.
            (
                "tx_rate" | "rx_rate" | "tx_burst" | "rx_burst" | "reservation" | "capacity",
                Value::Bool(false),
            ) => {
                cur[&k] = Value::Null;
                continue;
            }
            (
                "tx_rate" | "rx_rate" | "tx_burst" | "rx_burst" | "reservation" | "capacity",
                Value::String(w),
            ) if w == "none" => {
                cur[&k] = Value::Null;
                continue;
            }
            (
                "tx_rate" | "rx_rate" | "reservation" | "capacity",
                Value::String(_) | Value::Number(_),
            ) => {
                let r = parse_rate(&shown).map_err(|_| bad(allowed(&k)))?;
                cur[&k] = json!(r);
                continue;
            }
            ("tx_burst" | "rx_burst", Value::String(_) | Value::Number(_)) => {
                let b = parse_burst(&shown).map_err(|_| bad(allowed(&k)))?;
                cur[&k] = json!(b);
                continue;
            }
            ("tx_rate" | "rx_rate" | "tx_burst" | "rx_burst" | "reservation" | "capacity", _) => {
                return Err(bad(allowed(&k)))
            }
            // The guards' addresses: a list, or one string of them.
            ("addresses", Value::String(_) | Value::Array(_)) => {
                let a: hvnet_datapath::guard::Addresses = serde_json::from_value(v.clone())
                    .map_err(|e| bad(format!("{} ({e})", allowed(&k))))?;
                cur[&k] = serde_json::to_value(a).expect("addresses serialize");
                continue;
            }
            ("addresses", _) => return Err(bad(allowed(&k))),
            _ => {}
        }
        // Past the top of its range before its type could overflow.
        if let (Some((_, max)), Some(n)) = (setting_range(&k), v.as_u64()) {
            if n > max {
                return Err(bad(allowed(&k)));
            }
        }
        match (now, &v) {
            (Value::Bool(_), Value::Bool(_)) | (Value::Number(_), Value::Number(_)) => {}
            (Value::String(_), Value::String(w)) if words_of(&k).contains(&w.as_str()) => {}
            (Value::Bool(_), _) => return Err(bad("on or off".into())),
            _ => return Err(bad(allowed(&k))),
        }
        cur[&k] = v;
    }
    // A rate turned off takes its burst with it (unless the same change
    // says what the burst is).
    let has = |k: &str| asked.iter().any(|a| a == k);
    for (rate, burst) in [("tx_rate", "tx_burst"), ("rx_rate", "rx_burst")] {
        if has(rate) && !has(burst) && cur[rate].is_null() {
            cur[burst] = Value::Null;
        }
    }
    serde_json::from_value(cur).map_err(|e| CtlError::BadRequest {
        reason: format!("bad value: {e}"),
    })
}

/// The key of a VM port's access VLAN among a request's changes (beside
/// the settings' own keys: it is the port's, not a setting of the
/// datapath's).
pub const VLAN: &str = "vlan";

/// A `port set` request's changes read: the port's settings with them
/// applied ([`merge_settings`]) and the access VLAN asked for, if one was.
pub fn read_changes(
    cur: &PortSettings,
    mut changes: Value,
) -> Result<(PortSettings, Option<u16>), CtlError> {
    let vlan = match changes.as_object_mut().and_then(|c| c.remove(VLAN)) {
        None => None,
        Some(v) => Some(access_vlan(&v)?),
    };
    Ok((merge_settings(cur, changes)?, vlan))
}

/// A VLAN id as `set vlan=` takes it: 0 (untagged) to 4094.
fn access_vlan(v: &Value) -> Result<u16, CtlError> {
    let shown = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    shown
        .trim()
        .parse::<u16>()
        .ok()
        .filter(|&n| n <= 4094)
        .ok_or_else(|| CtlError::BadValue {
            setting: VLAN.into(),
            value: shown,
            allowed: "a VLAN id (0..4094; 0: untagged)".into(),
        })
}

/// The words a setting that takes a word accepts.
fn words_of(k: &str) -> &'static [&'static str] {
    match k {
        "rx_overflow" => &["drop", "backpressure"],
        "delivery" => &["auto", "thread"],
        "vlan_mode" => &["access", "trunk"],
        _ => &[],
    }
}

/// What a number or word setting takes, for errors: its range, or its
/// words.
fn allowed(k: &str) -> String {
    match k {
        "vlans" => return "VLAN ids and low-high ranges, 1..4094 (10,20,100-199)".into(),
        "native_vlan" => return format!("{} or none", number_in(1, 4094)),
        "tx_rate" | "rx_rate" | "reservation" | "capacity" => {
            return "a rate as tc writes it (1gbit, 500mbit, 64kbit), 1bit..1tbit, or off".into()
        }
        "tx_burst" | "rx_burst" => {
            return "a burst in bytes as tc writes it (256kb, 2mb), 65kb..1gb, or off".into()
        }
        "addresses" => {
            return "addresses and prefixes, comma-separated (198.18.0.5,fd00::5,198.18.7.0/24), or none".into()
        }
        _ => {}
    }
    match (setting_range(k), words_of(k)) {
        (Some((min, max)), _) => number_in(min, max),
        (None, []) => "see `hvnet port PORT`".into(),
        (None, words) => format!("a word ({})", words.join(" or ")),
    }
}

pub(super) fn number_in(min: u64, max: u64) -> String {
    format!("a number ({min}..{max})")
}

/// The switch's refusal of a setting, typed.
pub(super) fn setting_error(e: SettingError) -> CtlError {
    match e {
        SettingError::NoPort(name) => CtlError::not_found("port", &name, Vec::new()),
        SettingError::Range {
            setting,
            value,
            min,
            max,
        } => CtlError::BadValue {
            setting: setting.into(),
            value: value.to_string(),
            allowed: number_in(min, max),
        },
        SettingError::Fixed(reason) | SettingError::Conflict(reason) => {
            CtlError::Refused { reason }
        }
        SettingError::Device(reason) => CtlError::Failed { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_datapath::VlanMode;

    #[test]
    fn port_set_takes_a_trunk_s_vlans_as_an_operator_writes_them() {
        let cur = PortSettings::default();
        let new = merge_settings(
            &cur,
            json!({"vlan_mode": "trunk", "vlans": "10,20,100-199", "native_vlan": 5}),
        )
        .unwrap();
        assert_eq!(new.vlan_mode, VlanMode::Trunk);
        assert_eq!(new.vlans.to_string(), "10,20,100-199");
        assert_eq!(new.native_vlan, Some(5));
        // One VLAN comes as a number; native_vlan=none (or 0) clears it.
        let one = merge_settings(&new, json!({"vlans": 30, "native_vlan": "none"})).unwrap();
        assert_eq!(
            (one.vlans.to_string(), one.native_vlan),
            ("30".into(), None)
        );
        let zero = merge_settings(&new, json!({"native_vlan": 0})).unwrap();
        assert_eq!(zero.native_vlan, None);
        let back = merge_settings(&new, json!({"vlan_mode": "access"})).unwrap();
        assert_eq!(back.vlan_mode, VlanMode::Access);
        for (changes, why) in [
            (json!({"vlans": "10,5000"}), "vlan 5000 is outside 1..4094"),
            (json!({"vlans": true}), "VLAN ids and low-high ranges"),
            (json!({"native_vlan": 5000}), "a number (1..4094) or none"),
            (json!({"native_vlan": "five"}), "or none"),
            (json!({"vlan_mode": "hybrid"}), "access or trunk"),
        ] {
            let e = merge_settings(&cur, changes.clone()).unwrap_err();
            let CtlError::BadValue { allowed, .. } = &e else {
                panic!("{changes}: {e:?}");
            };
            assert!(allowed.contains(why), "{changes}: {allowed}");
        }
    }

    #[test]
    fn an_access_vlan_is_a_number_up_to_4094() {
        let cur = PortSettings::default();
        let (s, v) = read_changes(&cur, json!({"vlan": 7, "lro": false})).unwrap();
        assert_eq!((v, s.lro), (Some(7), false));
        assert_eq!(read_changes(&cur, json!({"vlan": "0"})).unwrap().1, Some(0));
        assert_eq!(read_changes(&cur, json!({})).unwrap().1, None);
        for bad in [json!(4095), json!("seven"), json!(-1), json!(true)] {
            let e = read_changes(&cur, json!({ "vlan": bad })).unwrap_err();
            assert!(e.to_string().contains("0..4094"), "{bad}: {e}");
        }
        let e = read_changes(&cur, json!({"vlann": 5})).unwrap_err();
        let CtlError::UnknownSetting { allowed, .. } = e else {
            panic!("{e:?}")
        };
        assert!(allowed.iter().any(|a| a == "vlan"), "{allowed:?}");
    }

    #[test]
    fn port_set_takes_a_ports_addresses_and_guards_or_refuses_the_whole_change() {
        let cur = PortSettings::default();
        let new = merge_settings(
            &cur,
            json!({"addresses": "198.18.0.5, fd00::5,198.18.8.0/24", "ra_guard": false}),
        )
        .unwrap();
        let shown: Vec<String> = new
            .addresses
            .entries()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(shown, ["198.18.0.5", "fd00::5", "198.18.8.0/24"]);
        assert!(!new.ra_guard && new.dhcp_guard);
        let none = merge_settings(&new, json!({"addresses": "none"})).unwrap();
        assert!(none.addresses.entries().is_empty());
        for (changes, why) in [
            (
                json!({"ra_guard": false, "addresses": "198.18.0.5,nonsense"}),
                "not an IP address",
            ),
            (json!({"addresses": 5}), "comma-separated"),
            (json!({"source_guard": "maybe"}), "on or off"),
        ] {
            let e = merge_settings(&cur, changes.clone()).unwrap_err();
            let CtlError::BadValue { allowed, .. } = &e else {
                panic!("{changes}: {e:?}");
            };
            assert!(allowed.contains(why), "{changes}: {allowed}");
        }
    }
}
