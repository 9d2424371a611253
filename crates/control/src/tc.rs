//! Traffic-control filters hvnet puts on devices it made: every frame that
//! enters one device leaves by another (`tc filter add dev FROM ingress
//! u32 match u32 0 0 action mirred egress redirect dev TO`). A tunnel
//! endpoint's TAP is joined to its underlay this way: what hvnet writes
//! into the TAP is sent by the underlay, GSO frames whole. Through
//! rtnetlink (`netlink-packet-route`'s tc messages), not the `tc` tool.

use crate::rtnl::{NetlinkError, Rtnl};
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::tc::{
    TcAction, TcActionAttribute, TcActionGeneric, TcActionMirrorOption, TcActionOption,
    TcActionType, TcAttribute, TcFilterU32Option, TcHandle, TcHeader, TcMessage, TcMirror,
    TcMirrorActionType, TcOption, TcU32Key, TcU32Selector, TcU32SelectorFlags,
};
use netlink_packet_route::RouteNetlinkMessage;

/// `TC_H_INGRESS`: the parent of an ingress qdisc.
const INGRESS_PARENT: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0xfff1,
};
/// The ingress qdisc's own handle (`ffff:`), its filters' parent.
const INGRESS: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0,
};
/// `ETH_P_ALL` in network order, as a filter's protocol.
const ETH_P_ALL_BE: u32 = 0x0003u16.to_be() as u32;

impl Rtnl {
    /// Redirects every frame that enters device `from` to the egress of
    /// device `to`: an ingress qdisc on `from` (which must have none) and
    /// one u32 filter that matches everything, with a `mirred` redirect.
    pub fn redirect_ingress(&mut self, from: &str, to: &str) -> Result<(), NetlinkError> {
        let from_index = self.index(from)?;
        let to_index = self.index(to)?;
        let mut qdisc = TcMessage::default();
        qdisc.header = TcHeader {
            index: from_index as i32,
            handle: INGRESS,
            parent: INGRESS_PARENT,
            ..TcHeader::default()
        };
        qdisc.attributes.push(TcAttribute::Kind("ingress".into()));
        self.request(
            &format!("add an ingress qdisc to {from}"),
            RouteNetlinkMessage::NewQueueDiscipline(qdisc),
            NLM_F_CREATE | NLM_F_EXCL,
        )?;
        // The structs are non-exhaustive: built from their defaults.
        let mut generic = TcActionGeneric::default();
        generic.action = TcActionType::Stolen;
        let mut parms = TcMirror::default();
        parms.generic = generic;
        parms.eaction = TcMirrorActionType::EgressRedir;
        parms.ifindex = to_index;
        let mut mirred = TcAction::default();
        mirred.attributes = vec![
            TcActionAttribute::Kind("mirred".into()),
            TcActionAttribute::Options(vec![TcActionOption::Mirror(TcActionMirrorOption::Parms(
                parms,
            ))]),
        ];
        // Any frame: one key, the first word under an empty mask.
        let mut selector = TcU32Selector::default();
        selector.flags = TcU32SelectorFlags::Terminal;
        selector.nkeys = 1;
        selector.keys = vec![TcU32Key::default()];
        let mut filter = TcMessage::default();
        filter.header = TcHeader {
            index: from_index as i32,
            parent: INGRESS,
            // Priority 1, every protocol.
            info: (1 << 16) | ETH_P_ALL_BE,
            ..TcHeader::default()
        };
        filter.attributes.push(TcAttribute::Kind("u32".into()));
        filter.attributes.push(TcAttribute::Options(vec![
            TcOption::U32(TcFilterU32Option::Selector(selector)),
            TcOption::U32(TcFilterU32Option::Action(vec![mirred])),
        ]));
        self.request(
            &format!("redirect {from}'s ingress to {to}"),
            RouteNetlinkMessage::NewTrafficFilter(filter),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }
}
