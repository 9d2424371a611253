//! Replays every committed corpus input through its target on stable Rust,
//! so the test command checks them without a fuzzing toolchain.

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        let data = std::fs::read(&path).expect("corpus file");
        f(&data);
        n += 1;
    }
    assert!(n > 0, "corpus {target} is empty");
    println!("{target}: {n} inputs replayed");
}

#[test]
fn cni_config() {
    replay("cni_config", hvnet_fuzz::cni_config);
}

#[test]
fn wire_layers() {
    replay("wire_layers", hvnet_fuzz::wire_layers);
}

#[test]
fn vnet_hdr() {
    replay("vnet_hdr", hvnet_fuzz::vnet_hdr);
}

#[test]
fn gro_table() {
    replay("gro_table", hvnet_fuzz::gro_table);
}

#[test]
fn gso_segment() {
    replay("gso_segment", hvnet_fuzz::gso_segment);
}

#[test]
fn rss_vxlan() {
    replay("rss_vxlan", hvnet_fuzz::rss_vxlan);
}

#[test]
fn switch_ops() {
    replay("switch_ops", hvnet_fuzz::switch_ops);
}

#[test]
fn vtep_receive() {
    replay("vtep_receive", hvnet_fuzz::vtep_receive);
}

#[test]
fn virtqueue() {
    replay("virtqueue", hvnet_fuzz::virtqueue);
}

#[test]
fn ctl_request() {
    replay("ctl_request", hvnet_fuzz::ctl_request);
}

#[test]
fn vhost_front_end() {
    replay("vhost_front_end", hvnet_fuzz::vhost_front_end);
}

#[test]
fn libvirt_domain() {
    replay("libvirt_domain", hvnet_fuzz::libvirt_domain);
}

#[test]
fn membership() {
    replay("membership", hvnet_fuzz::membership);
}

#[test]
fn lacpdu() {
    replay("lacpdu", hvnet_fuzz::lacpdu);
}

#[test]
fn acl_rules() {
    replay("acl_rules", hvnet_fuzz::acl_rules);
}

#[test]
fn conntrack() {
    replay("conntrack", hvnet_fuzz::conntrack);
}

#[test]
fn guard() {
    replay("guard", hvnet_fuzz::guard);
}

#[test]
fn flow_words() {
    replay("flow_words", hvnet_fuzz::flow_words);
}
