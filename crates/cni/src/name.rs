//! The port's name for an attachment: the same for the same container and
//! interface on every call (DEL and CHECK find what ADD made), within the
//! 24 characters of a VM's name.

/// `cni-` and 16 hex digits of a hash of the container ID and interface.
pub fn port_name(container: &str, ifname: &str) -> String {
    format!(
        "cni-{:016x}",
        fnv1a(&[container.as_bytes(), b"/", ifname.as_bytes()])
    )
}

/// 64-bit FNV-1a: stable across builds and hosts (the standard library's
/// hasher is not promised to be).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_per_attachment_in_a_vm_names_alphabet() {
        let a = port_name("abc", "eth0");
        assert_eq!(a, port_name("abc", "eth0"));
        assert_ne!(a, port_name("abc", "eth1"));
        assert_ne!(a, port_name("abd", "eth0"));
        assert_eq!(a.len(), 20);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        // FNV-1a's published vector: "a" hashes to af63dc4c8601ec8c.
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
    }
}
