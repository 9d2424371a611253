//! Counters operators read. Every counter set has a single writer (an
//! ingress worker for its queue, a producer for its lane into a receive
//! queue, a delivery thread for what it delivered): adding is a relaxed load
//! and store, no locked instruction; a snapshot sums the sets.
//!
//! Accounting, per port:
//! - as ingress (frames from the guest or the wire): `frames = forwarded +
//!   drop_* + tunnel_control + gateway_answered + arp_suppressed +
//!   nd_suppressed + mcast_consumed + (lro_segments - lro_frames)`, the last the
//!   frames an uplink's software LRO merged into others;
//! - as egress (frames to the guest): `offered = delivered_source_frames +
//!   drop_* + in_flight`, where a coalesced frame delivers as many source
//!   frames as it merged and `in_flight` is what sits in GRO runs and rings.
//!
//! A sample of `hvnet stats .../rx_summary --json`:
//! `{"offered": 6290, "delivered_frames": 801, "delivered_source_frames": 6290,
//!   "lro_frames": 144, "lro_segments": 5645, "drop_ring1_full": 0, ...}`

mod of_errors;

use serde::ser::SerializeMap;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($(#[$m:meta])* $name:ident / $snap:ident, $way:expr, { $($(#[$fm:meta])* $f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Default, Debug)]
        pub struct $name {
            $($(#[$fm])* pub $f: AtomicU64,)*
            /// Frames dropped, by reason.
            pub dropped: Drops,
        }

        $(#[$m])*
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $snap {
            $($(#[$fm])* pub $f: u64,)*
            /// Frames dropped, by reason (serialized as `drop_REASON`).
            pub dropped: DropStats,
        }

        impl $name {
            /// Reads every counter.
            pub fn snapshot(&self) -> $snap {
                $snap { $($f: self.$f.load(Relaxed),)* dropped: self.dropped.snapshot() }
            }
            /// Adds a snapshot's every counter to these (the counters of
            /// one that is gone, kept in a total that outlives it).
            pub fn absorb(&self, o: &$snap) {
                $(add(&self.$f, o.$f);)*
                for (a, b) in self.dropped.0.iter().zip(o.dropped.0) {
                    add(a, b);
                }
            }
            /// Counts `n` frames dropped for `reason`, one of this way's.
            #[inline]
            pub fn count_drop(&self, reason: DropReason, n: u64) {
                debug_assert_eq!(reason.way(), $way, "{reason:?}");
                add(&self.dropped.0[reason as usize], n);
            }
        }

        impl $snap {
            /// Every counter with its name, in declaration order, then
            /// this way's drops as `drop_REASON` (for views that look at
            /// them by name without serializing).
            pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($f), self.$f)),*]
                    .into_iter()
                    .chain(DropReason::of_way($way).map(|r| (r.key(), self.dropped[r])))
            }
            /// All drops.
            pub fn drops(&self) -> u64 {
                self.dropped.total()
            }
        }

        impl Serialize for $snap {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(None)?;
                for (k, v) in self.named() {
                    m.serialize_entry(k, &v)?;
                }
                m.end()
            }
        }

        impl std::ops::AddAssign for $snap {
            fn add_assign(&mut self, o: $snap) {
                $(self.$f += o.$f;)*
                self.dropped += o.dropped;
            }
        }
    };
}

/// A level read at one moment (ring fill, a size, frames in flight, a
/// table's length, an identity that holds), not a running total: the
/// type of a view's field says which it is, so that metrics export it as
/// a gauge and every other number as a counter (none guessed from a
/// key's name). It serializes as the bare value (`hvnet stats --json`
/// shows `5`, not `{"Level": 5}`), as a newtype struct named
/// [`Level::NAME`], which a serializer that cares can see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Level<T>(pub T);

impl Level<()> {
    /// The newtype's name as serializers see it: distinctive, so that no
    /// other newtype is taken for a level.
    pub const NAME: &'static str = "hvnet::Level";
}

impl<T: Serialize> Serialize for Level<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct(Level::NAME, &self.0)
    }
}

/// Adds `n` to a counter. Only the counter set's one writer calls this.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Which way a frame was going when it was dropped: from the port into
/// the switch (ingress), or from the switch to the port (egress).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Read from the port (a guest's transmit, the wire's receive).
    FromPort,
    /// Offered to the port (a guest's receive, the wire's transmit).
    ToPort,
}

/// Declares the drop reasons once: each variant with its doc, its name as
/// views and metrics show it, and the way its frames were going.
macro_rules! drop_reasons {
    ($(#[$m:meta])* pub enum DropReason { $($(#[$vm:meta])* $v:ident = $name:literal, $way:ident;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DropReason { $($(#[$vm])* $v,)* }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: [DropReason; DropReason::COUNT] = [$(DropReason::$v),*];
            /// How many reasons there are (the counters' array length).
            pub const COUNT: usize = [$(DropReason::$v),*].len();

            /// The reason's name, as views and metrics label it.
            pub fn name(self) -> &'static str {
                match self { $(DropReason::$v => $name,)* }
            }

            /// The counter's key in `hvnet stats`: `drop_` and the name.
            pub fn key(self) -> &'static str {
                match self { $(DropReason::$v => concat!("drop_", $name),)* }
            }

            /// The way a frame dropped for this reason was going.
            pub fn way(self) -> Way {
                match self { $(DropReason::$v => Way::$way,)* }
            }
        }
    };
}

drop_reasons! {
    /// Why the switch dropped a frame: one vocabulary for every port kind,
    /// each reason counted in its own slot and exported with the reason as a
    /// label (`hvnet_rx_summary_drops_total{reason="ring1_full"}`). Every
    /// receive, send and tunnel error converts to one (or, for errors about
    /// the queue rather than a frame, to none) by an exhaustive match.
    pub enum DropReason {
        /// Virtio-net header malformed or not fitting the frame.
        BadVnetHeader = "bad_vnet_header", FromPort;
        /// A header of the frame is malformed.
        BadFrame = "bad_frame", FromPort;
        /// A GSO frame asking for too many segments (tiny gso_size).
        GsoSegments = "gso_segments", FromPort;
        /// Security policy (a forged source MAC).
        Policy = "policy", FromPort;
        /// Over the port's `tx_rate` (its policer).
        Policed = "policed", FromPort;
        /// A VLAN the port does not carry: a tagged frame at an access
        /// port; at a trunk, a tag of a VLAN it does not allow (or an
        /// 802.1ad tag), or an untagged frame without a native VLAN.
        VlanNotAllowed = "vlan_not_allowed", FromPort;
        /// No port to send to.
        NoRoute = "no_route", FromPort;
        /// Routed at a tenant's gateway with its TTL run out (answered
        /// with ICMP time exceeded).
        TtlExceeded = "ttl_exceeded", FromPort;
        /// To a gateway, for an address its tenant has no route to.
        Unrouted = "unrouted", FromPort;
        /// Routed at a gateway to a next hop whose MAC is not known yet
        /// (the gateway asks for it with ARP).
        NeighbourUnresolved = "neighbour_unresolved", FromPort;
        /// The port is disconnected (`connected = off`, a vNIC's cable pulled).
        Disconnected = "disconnected", FromPort;
        /// Sent by a port that is a mirror's output (which only receives
        /// the mirror's copies, as in Open vSwitch).
        MirrorPort = "mirror_port", FromPort;
        /// A team of uplinks: from a member that is not the active one
        /// (`active-backup`; broadcasts and multicasts for the other
        /// switch-independent policies).
        TeamNotActiveMember = "team_not_active_member", FromPort;
        /// A team of uplinks: one of its own VMs' frames, looped back by
        /// the physical switch.
        TeamLooped = "team_looped", FromPort;
        /// A team of uplinks: from a member LACP does not collect from.
        TeamNotCollecting = "team_not_collecting", FromPort;
        /// A team of uplinks: a LACPDU that does not parse.
        LacpMalformed = "lacp_malformed", FromPort;
        /// A team of uplinks: a LACPDU from a second partner on a member
        /// whose partner is current.
        LacpSecondPartner = "lacp_second_partner", FromPort;
        /// A team of uplinks: a LACPDU on a team that does not run LACP.
        LacpNotRunning = "lacp_not_running", FromPort;
        /// A team of uplinks: LACPDUs past three a second on a member.
        LacpTooMany = "lacp_too_many", FromPort;
        /// An IGMP message malformed (truncated, its checksum wrong, a
        /// report of no group): dropped, as the Linux bridge drops it.
        BadIgmp = "bad_igmp", FromPort;
        /// An MLD message malformed, likewise.
        BadMld = "bad_mld", FromPort;
        /// At a tunnel endpoint: neither VXLAN to it nor ARP for it.
        NotTunnel = "not_tunnel", FromPort;
        /// VXLAN without the I flag, truncated, or with an inner frame whose
        /// headers lie.
        BadVxlan = "bad_vxlan", FromPort;
        /// VXLAN for another VNI.
        Vni = "vni", FromPort;
        /// By the kernel before hvnet could read them: an uplink socket's
        /// buffer was full, or a frame could not be handed over with the
        /// socket's header (`PACKET_STATISTICS`).
        Kernel = "kernel", FromPort;
        /// A vhost-user guest's transmit chain refused: a descriptor index past the table.
        TxDescIndex = "tx_desc_index", FromPort;
        /// A vhost-user guest's transmit chain refused: a chain that loops.
        TxDescLoop = "tx_desc_loop", FromPort;
        /// A vhost-user guest's transmit chain refused: a misplaced indirect descriptor (nested, with `NEXT`, not first).
        TxDescIndirect = "tx_desc_indirect", FromPort;
        /// A vhost-user guest's transmit chain refused: an indirect table of a bad length.
        TxDescIndirectLen = "tx_desc_indirect_len", FromPort;
        /// A vhost-user guest's transmit chain refused: a descriptor, table or ring outside the guest's memory.
        TxDescMemory = "tx_desc_memory", FromPort;
        /// A vhost-user guest's transmit chain refused: an available index moved by more than the queue holds.
        TxDescAvailIndex = "tx_desc_avail_index", FromPort;
        /// A vhost-user guest's transmit chain refused: a device-writable
        /// buffer in it.
        TxDescDirection = "tx_desc_direction", FromPort;
        /// A vhost-user guest's transmit chain refused: longer than any frame.
        TxDescTooLong = "tx_desc_too_long", FromPort;
        /// IP source guard: sent from an address not the port's
        /// (`source_guard`, docs/guide/guards.md).
        SourceGuard = "source_guard", FromPort;
        /// ARP inspection: an ARP message claiming an address not the
        /// port's, or a sender MAC not the frame's (`arp_guard`).
        ArpGuard = "arp_guard", FromPort;
        /// ND inspection: a neighbor advertisement or solicitation
        /// claiming an address not the port's, a link-layer address not
        /// the frame's, or malformed options (`nd_guard`).
        NdGuard = "nd_guard", FromPort;
        /// DHCP server guard: a DHCP or DHCPv6 server or relay message
        /// (`dhcp_guard`).
        DhcpGuard = "dhcp_guard", FromPort;
        /// Router-advertisement guard (RFC 6105): a router advertisement
        /// or redirect (`ra_guard`).
        RaGuard = "ra_guard", FromPort;
        /// No ring-1 buffer.
        Ring1Full = "ring1_full", ToPort;
        /// Not enough ring-2 buffers.
        Ring2Full = "ring2_full", ToPort;
        /// Larger than this port's MTU (a GSO frame: its segments would be).
        MtuExceeded = "mtu_exceeded", ToPort;
        /// At an uplink: over the sending VM's allowance of its capacity
        /// (`capacity`, `shares`, `reservation`; Network I/O Control).
        UplinkShare = "uplink_share", ToPort;
        /// The write into the guest or the wire failed.
        WriteError = "write_error", ToPort;
        /// A team of uplinks had no member to send on.
        TeamNoMember = "team_no_member", ToPort;
        /// The port was down: its link, or, for a frame to its own
        /// address, its cable pulled (`connected = off`).
        PortDown = "port_down", ToPort;
        /// A vhost-user guest's receive virtqueue had no free buffer (the
        /// guest is not keeping up: its ring is full).
        VirtqueueFull = "virtqueue_full", ToPort;
        /// No remote tunnel endpoint for the frame is resolved yet (ARP
        /// pending).
        TunnelUnresolved = "tunnel_unresolved", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// a descriptor index past the table.
        RxDescIndex = "rx_desc_index", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// a chain that loops.
        RxDescLoop = "rx_desc_loop", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// a misplaced indirect descriptor (nested, with `NEXT`, not first).
        RxDescIndirect = "rx_desc_indirect", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// an indirect table of a bad length.
        RxDescIndirectLen = "rx_desc_indirect_len", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// a descriptor, table or ring outside the guest's memory.
        RxDescMemory = "rx_desc_memory", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// an available index moved by more than the queue holds.
        RxDescAvailIndex = "rx_desc_avail_index", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty): a
        /// read-only buffer in it.
        RxDescDirection = "rx_desc_direction", ToPort;
        /// A vhost-user guest's receive chain refused (given back empty):
        /// its first buffer shorter than the virtio-net header.
        RxDescShort = "rx_desc_short", ToPort;
        /// Security groups: the sending port's out rules denied it (a
        /// deny rule, or no rule allowed it).
        AclOut = "acl_out", FromPort;
        /// Security groups: a TCP segment its tracked connection's
        /// state does not take, or an answer to nothing, from the port.
        AclOutInvalid = "acl_out_invalid", FromPort;
        /// Security groups: the sending port's connection table (or
        /// every port's) was full.
        ConntrackFullOut = "conntrack_full_out", FromPort;
        /// Security groups: the receiving port's in rules denied it.
        AclIn = "acl_in", ToPort;
        /// Security groups: invalid for the receiving port's tracked
        /// connection.
        AclInInvalid = "acl_in_invalid", ToPort;
        /// Security groups: the receiving port's connection table (or
        /// every port's) was full.
        ConntrackFullIn = "conntrack_full_in", ToPort;
    }
}

/// Drop counters, one per reason (only one way's are ever added to).
#[derive(Debug)]
pub struct Drops([AtomicU64; DropReason::COUNT]);

impl Default for Drops {
    fn default() -> Drops {
        Drops(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Drops {
    fn snapshot(&self) -> DropStats {
        DropStats(std::array::from_fn(|i| self.0[i].load(Relaxed)))
    }
}

/// A snapshot of [`Drops`], indexed by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropStats([u64; DropReason::COUNT]);

impl Default for DropStats {
    fn default() -> DropStats {
        DropStats([0; DropReason::COUNT])
    }
}

impl DropStats {
    /// All drops, whatever the reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// The reasons with at least one drop.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .into_iter()
            .map(|r| (r, self[r]))
            .filter(|(_, n)| *n > 0)
    }
}

impl std::ops::Index<DropReason> for DropStats {
    type Output = u64;
    fn index(&self, r: DropReason) -> &u64 {
        &self.0[r as usize]
    }
}

impl std::ops::AddAssign for DropStats {
    fn add_assign(&mut self, o: DropStats) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

counters! {
    /// Frames a guest sent (read from one TAP queue).
    IngressCounters / IngressStats, Way::FromPort, {
        /// Frames read.
        frames,
        /// Bytes read (frames, without the virtio-net header).
        bytes,
        /// Frames that were GSO (TSO from the guest).
        gso_frames,
        /// Frames forwarded (unicast, or flooded once however many copies).
        forwarded,
        /// Frames flooded (broadcast, multicast, unknown unicast).
        flooded,
        /// Reads put off because the port's buffer cap was reached
        /// (backpressure on the guest, not a drop).
        no_buffer_stalls,
        /// Times the queue's thread woke to read (frames / wakeups: how
        /// many a wake-up finds; `rx_usecs` raises it).
        wakeups,
        /// Times a queue found empty under load had frames again within
        /// the short poll before its thread would have slept.
        busy_poll_hits,
        /// Nanoseconds its worker spent on this queue (reading, switching,
        /// writing to the destinations): the load queues are placed by.
        busy_ns,
        /// Times the queue was left unread because its port had spent its
        /// `cpu_limit` (backpressure on the guest, not a drop).
        cpu_limit_holds,
        /// Frames to an uplink dropped over the VM's share of its
        /// capacity (the uplink counts them as `uplink_share` drops).
        uplink_share_drops,
        /// TSO frames to an uplink cut to the segments the VM's share held.
        uplink_share_cut,
        /// Source addresses not learned: the FDB's per-port or total limit,
        /// or another port's static address (the frame still goes out).
        fdb_learn_refused,
        /// Frames a tunnel endpoint consumed (ARP for its address, a far
        /// end's report of a trace, a far end's synthetic frame, which is
        /// switched apart and counted nowhere else).
        tunnel_control,
        /// Frames a tenant's gateway answered or took (ARP for it, ARP
        /// replies to it, pings to it).
        gateway_answered,
        /// Frames routed between segments at a gateway (counted as
        /// forwarded too).
        routed,
        /// ARP requests from a VM answered by the switch for a remote IP
        /// the fabric advertised (BGP EVPN), instead of being flooded.
        arp_suppressed,
        /// IPv6 neighbor solicitations answered the same way.
        nd_suppressed,
        /// VXLAN frames decapsulated (their inner frames then forwarded or
        /// dropped as any frame).
        decapsulated,
        /// Coalesced frames an uplink's software LRO forwarded.
        lro_frames,
        /// Frames from the wire inside them (each of the others merged
        /// into one of these).
        lro_segments,
        /// Transport checksums an uplink with `csum = "software"` completed
        /// or verified itself (the device's word not taken).
        csum_verified,
        /// Of those, found wrong (passed on without DATA_VALID, for the
        /// receiver to drop).
        csum_bad,
        /// IGMP and MLD reports and leaves read (multicast snooping): each
        /// goes on to the router ports, or everywhere without a querier.
        mcast_reports,
        /// IGMP and MLD queries read (flooded; the port becomes a router
        /// port).
        mcast_queries,
        /// Group frames forwarded to their members and the router ports
        /// only, not flooded.
        mcast_to_members,
        /// Reports and leaves no other port needed (no router port in
        /// their VLAN: the switch's own querier took them).
        mcast_consumed,
        /// Memberships not recorded: the multicast database's per-port or
        /// total limit (the group's frames are then flooded).
        mdb_refused,
        /// Group frames flooded because a join to their group was refused
        /// (the table full): a listener the table does not know may be
        /// anywhere.
        mcast_refused_flooded,
        /// Frames read with their payload left in the guest's memory (a
        /// vhost-user guest's frame that needs a large buffer: GSO,
        /// jumbo), to be copied once, straight into the receiving guest.
        payloads_left,
        /// TSO frames the port's policer cut to the segments its bucket
        /// held (the rest dropped; the frame forwarded, not a drop).
        policed_cut,
    }
}

counters! {
    /// Frames the switch delivers to a guest receive queue.
    EgressCounters / EgressStats, Way::ToPort, {
        /// Frames handed to this queue by the forwarding stage.
        offered,
        /// Frames written into the guest.
        delivered_frames,
        /// Bytes written into the guest.
        delivered_bytes,
        /// Offered frames those deliveries account for.
        delivered_source_frames,
        /// Coalesced (LRO) frames delivered.
        lro_frames,
        /// Bytes of coalesced frames delivered.
        lro_bytes,
        /// Segments inside the coalesced frames.
        lro_segments,
        /// GSO frames delivered whole (the VM-to-VM fast path).
        gso_intact_frames,
        /// GSO frames segmented in software for this guest.
        segmented_frames,
        /// Segments those produced.
        segments_out,
        /// Partial checksums completed in software for this guest.
        csum_completed,
        /// Frames delivered with DATA_VALID (checksum verified by hvnet).
        data_valid_frames,
        /// Times a sender waited for ring space (`rx_overflow = "backpressure"`).
        backpressure_waits,
        /// Batches the sender's worker delivered itself (the queue was idle).
        inline_batches,
        /// Frames copied once, from the sending guest's buffers straight
        /// into this guest's (the rest went through a switch buffer).
        one_copy_frames,
        /// Times this queue's delivery waited for its `rx_rate` (shaper).
        shaper_waits,
    }
}

impl EgressStats {
    /// Frames offered but neither delivered nor dropped yet.
    pub fn in_flight(&self) -> i64 {
        self.offered as i64 - self.delivered_source_frames as i64 - self.drops() as i64
    }
}

impl IngressStats {
    /// Frames merged into another by software LRO at an uplink (forwarded
    /// inside it).
    pub fn lro_merged(&self) -> u64 {
        self.lro_segments.saturating_sub(self.lro_frames)
    }
    /// True when every frame read is forwarded (alone, or merged into a
    /// coalesced frame), dropped or consumed by a tunnel endpoint.
    pub fn balanced(&self) -> bool {
        self.frames
            == self.forwarded
                + self.drops()
                + self.tunnel_control
                + self.gateway_answered
                + self.arp_suppressed
                + self.nd_suppressed
                + self.mcast_consumed
                + self.lro_merged()
    }
}

#[cfg(test)]
mod tests;
