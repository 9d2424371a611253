use super::*;

/// A domain as `virsh dumpxml` gives it (trimmed to what hvnet reads and
/// what sits around it).
fn domain(interfaces: &str, metadata: &str) -> String {
    format!(
        r#"<domain type='qemu' id='7'>
  <name>web1</name>
  <uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
  <metadata>{metadata}</metadata>
  <devices>
    <interface type='network'><mac address='52:54:00:00:00:99'/><source network='default'/></interface>
    {interfaces}
  </devices>
</domain>"#
    )
}

/// A switch's `[libvirt]` as a topology gives it.
fn libvirt() -> crate::topology::Libvirt {
    crate::topology::Libvirt {
        sockets: "/run/hvnet-libvirt/t".into(),
        group: "kvm".into(),
        gid: 0,
        uri: "qemu:///system".into(),
    }
}

const NIC: &str = r#"<interface type='vhostuser'>
      <mac address='52:54:00:00:00:01'/>
      <source type='unix' path='/run/hvnet-libvirt/lab/web1.sock' mode='server'/>
      <target dev='web1-eth0'/>
      <model type='virtio'/>
      <driver queues='2'/>
      <alias name='ua-net0'/>
    </interface>"#;

#[test]
fn reads_a_vhost_user_interface_and_nothing_else() {
    let d = parse(&domain(NIC, "")).unwrap();
    assert_eq!((d.name.as_str(), d.nics.len()), ("web1", 1));
    let n = &d.nics[0];
    assert_eq!(n.mac.to_string(), "52:54:00:00:00:01");
    assert_eq!(n.socket, PathBuf::from("/run/hvnet-libvirt/lab/web1.sock"));
    assert!(n.qemu_listens && n.link_up && !n.claimed);
    assert_eq!((n.queues, n.name.as_deref()), (2, Some("web1-eth0")));
    assert_eq!(n.vlan, Vlan::None);
}

#[test]
fn link_state_client_mode_and_defaults() {
    let nic = r#"<interface type='vhostuser'><mac address='52:54:00:00:00:02'/>
      <source type='unix' path='/run/x/a.sock' mode='client'/><link state='down'/></interface>"#;
    let n = &parse(&domain(nic, "")).unwrap().nics[0];
    assert!(!n.qemu_listens && !n.link_up);
    assert_eq!((n.queues, n.name.as_deref()), (1, None));
}

fn with_vlan(vlan: &str) -> Result<Vlan, DomainError> {
    let meta = format!(
        r#"<hvnet:ports xmlns:hvnet="{NAMESPACE}"><hvnet:port mac="52:54:00:00:00:01" name="web">{vlan}</hvnet:port></hvnet:ports>"#
    );
    let d = parse(&domain(NIC, &meta))?;
    assert!(d.nics[0].claimed);
    assert_eq!(
        d.nics[0].name.as_deref(),
        Some("web"),
        "metadata's name first"
    );
    Ok(d.nics[0].vlan.clone())
}

#[test]
fn vlans_read_as_libvirt_reads_them() {
    let tag = |id: &str, native: &str| format!("<hvnet:tag id='{id}'{native}/>");
    let v = |trunk: &str, tags: &[String]| {
        with_vlan(&format!(
            "<hvnet:vlan{trunk}>{}</hvnet:vlan>",
            tags.concat()
        ))
    };
    assert_eq!(v("", &[tag("42", "")]), Ok(Vlan::Access(42)));
    assert_eq!(
        v(" trunk='yes'", &[tag("42", "")]),
        Ok(Vlan::Trunk {
            vlans: vec!["42".into()],
            native: None
        })
    );
    assert_eq!(
        v("", &[tag("10", ""), tag("20", "")]),
        Ok(Vlan::Trunk {
            vlans: vec!["10".into(), "20".into()],
            native: None
        })
    );
    assert_eq!(
        v(
            " trunk='yes'",
            &[tag("100-199", ""), tag("5", " nativeMode='untagged'")]
        ),
        Ok(Vlan::Trunk {
            vlans: vec!["100-199".into(), "5".into()],
            native: Some(5)
        })
    );
    assert_eq!(with_vlan(""), Ok(Vlan::None));
}

#[test]
fn bad_vlans_are_refused_with_the_reason() {
    let cases = [
        ("<hvnet:vlan><hvnet:tag id='4095'/></hvnet:vlan>", "outside 1..4094"),
        ("<hvnet:vlan><hvnet:tag id='0'/></hvnet:vlan>", "outside 1..4094"),
        ("<hvnet:vlan><hvnet:tag id='ten'/></hvnet:vlan>", "outside 1..4094"),
        ("<hvnet:vlan trunk='yes'><hvnet:tag id='30-20'/></hvnet:vlan>", "backwards"),
        ("<hvnet:vlan><hvnet:tag id='10-20'/></hvnet:vlan>", "needs trunk='yes'"),
        ("<hvnet:vlan trunk='maybe'><hvnet:tag id='1'/></hvnet:vlan>", "yes or no"),
        ("<hvnet:vlan/>", "without a <tag>"),
        (
            "<hvnet:vlan trunk='yes'><hvnet:tag id='1' nativeMode='tagged'/></hvnet:vlan>",
            "not supported",
        ),
        (
            "<hvnet:vlan trunk='yes'><hvnet:tag id='1' nativeMode='untagged'/><hvnet:tag id='2' nativeMode='untagged'/></hvnet:vlan>",
            "one native VLAN",
        ),
    ];
    for (xml, why) in cases {
        let e = with_vlan(xml).unwrap_err();
        let DomainError::PortVlan { mac, source } = &e else {
            panic!("{xml}: {e:?}")
        };
        assert_eq!(mac.to_string(), "52:54:00:00:00:01", "names the interface");
        assert!(source.to_string().contains(why), "{xml}: {source}");
        let words = crate::error::chain(&e);
        assert!(
            words.contains("52:54:00:00:00:01") && words.ends_with(&source.to_string()),
            "the port, then the reason: {words}"
        );
    }
}

#[test]
fn xml_that_is_not_a_domain_is_refused() {
    let e = parse("<domain").unwrap_err();
    assert!(matches!(e, DomainError::Xml(_)), "{e:?}");
    assert!(crate::error::chain(&e).starts_with("cannot read the domain XML: "));
    assert_eq!(
        parse("<network/>"),
        Err(DomainError::NotDomain {
            root: "network".into()
        })
    );
    let no_mac = r#"<interface type='vhostuser'><source path='/a' mode='server'/></interface>"#;
    assert_eq!(parse(&domain(no_mac, "")), Err(DomainError::NoMac));
    let bad_mode = r#"<interface type='vhostuser'><mac address='52:54:00:00:00:03'/><source path='/a' mode='both'/></interface>"#;
    let e = parse(&domain(bad_mode, "")).unwrap_err();
    assert_eq!(
        e,
        DomainError::Interface {
            mac: "52:54:00:00:00:03".parse().unwrap(),
            source: InterfaceError::SourceMode {
                mode: "both".into()
            }
        }
    );
    assert_eq!(
        crate::error::chain(&e),
        "cannot read interface 52:54:00:00:00:03: <source mode='both'>: server or client"
    );
}

#[test]
fn bandwidth_is_read_in_libvirts_units_and_becomes_the_ports_rates() {
    let nic = NIC.replace(
        "<model type='virtio'/>",
        "<model type='virtio'/><bandwidth><inbound average='125000' peak='250000' burst='1024'/>\
         <outbound average='12500' burst='8'/></bandwidth>",
    );
    let d = parse(&domain(&nic, "")).unwrap();
    let b = &d.nics[0].bandwidth;
    assert_eq!(
        (b.inbound, b.outbound),
        (
            Some(BandwidthRate {
                average: 125_000,
                burst: Some(1024)
            }),
            Some(BandwidthRate {
                average: 12_500,
                burst: Some(8)
            })
        )
    );
    // 125,000 kB/s is 1 Gbit/s; a burst below one GSO frame is raised to
    // one. The table is what `hvnet vm add` takes.
    let lv = libvirt();
    let t = super::super::vm_table(&lv, &d, &d.nics[0]);
    assert!(
        t.contains("rx_rate = \"1000000kbit\"\nrx_burst = \"1024kb\""),
        "{t}"
    );
    assert!(
        t.contains("tx_rate = \"100000kbit\"\ntx_burst = \"65kb\""),
        "{t}"
    );
    let vm = crate::topology::parse(&format!("name = \"t\"\n{t}"));
    let s = &vm.expect("the table parses").vms[0].settings;
    assert_eq!(s.rx_rate.map(|r| r.to_string()).as_deref(), Some("1gbit"));
    assert_eq!(s.tx_rate.map(|r| r.to_string()).as_deref(), Some("100mbit"));
    // No average, or 0: no limit; a word: refused with the reason.
    let none = NIC.replace(
        "<model type='virtio'/>",
        "<bandwidth><inbound average='0'/></bandwidth>",
    );
    assert_eq!(
        parse(&domain(&none, "")).unwrap().nics[0].bandwidth,
        Bandwidth::default()
    );
    let bad = NIC.replace(
        "<model type='virtio'/>",
        "<bandwidth><outbound average='fast'/></bandwidth>",
    );
    let DomainError::Interface { source, .. } = parse(&domain(&bad, "")).unwrap_err() else {
        panic!("not the interface's error")
    };
    assert_eq!(
        source,
        InterfaceError::Bandwidth {
            direction: "outbound",
            attribute: "average",
            value: "fast".into()
        }
    );
    assert!(source
        .to_string()
        .contains("average='fast'> is not a number"));
}

#[test]
fn the_domain_and_its_interface_go_with_the_port() {
    let d = parse(&domain(NIC, "")).unwrap();
    assert_eq!(d.nics[0].alias.as_deref(), Some("ua-net0"));
    let lv = libvirt();
    let t = super::super::vm_table(&lv, &d, &d.nics[0]);
    let vm = &crate::topology::parse(&format!("name = \"t\"\n{t}"))
        .expect("the table parses")
        .vms[0];
    let ids = vm.external_ids();
    assert_eq!(
        ids,
        [
            ("domain".to_string(), "web1".to_string()),
            (
                "domain_uuid".into(),
                "4dea22b3-1d52-d8f3-2516-782e98ab3fa0".into()
            ),
            ("interface".into(), "ua-net0".into()),
        ]
    );
    // A name with quotes and a newline is written so that it parses.
    let odd = domain(NIC, "").replace("<name>web1</name>", "<name>a \"b\"\nc</name>");
    let d = parse(&odd).unwrap();
    let t = super::super::vm_table(&lv, &d, &d.nics[0]);
    let vm = &crate::topology::parse(&format!("name = \"t\"\n{t}"))
        .unwrap()
        .vms[0];
    assert_eq!(vm.domain.as_ref().unwrap().name, "a \"b\" c");
}
