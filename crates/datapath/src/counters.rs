//! Counters operators read. Every counter set has a single writer (an
//! ingress worker for its queue, a producer for its lane into a receive
//! queue, a delivery thread for what it delivered): adding is a relaxed load
//! and store, no locked instruction; a snapshot sums the sets.
//!
//! Accounting, per port:
//! - as ingress (frames from the guest or the wire): `frames = forwarded +
//!   drop_* + tunnel_control + arp_suppressed + nd_suppressed +
//!   (lro_segments - lro_frames)`, the last the
//!   frames an uplink's software LRO merged into others;
//! - as egress (frames to the guest): `offered = delivered_source_frames +
//!   drop_* + in_flight`, where a coalesced frame delivers as many source
//!   frames as it merged and `in_flight` is what sits in GRO runs and rings.
//!
//! A sample of `hvnet stats .../rx_summary --json`:
//! `{"offered": 6290, "delivered_frames": 801, "delivered_source_frames": 6290,
//!   "lro_frames": 144, "lro_segments": 5645, "drop_ring1_full": 0, ...}`

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($(#[$m:meta])* $name:ident / $snap:ident { $($(#[$fm:meta])* $f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Default, Debug)]
        pub struct $name { $($(#[$fm])* pub $f: AtomicU64),* }

        $(#[$m])*
        #[derive(Default, Debug, Clone, Copy, Serialize, PartialEq, Eq)]
        pub struct $snap { $($(#[$fm])* pub $f: u64),* }

        impl $name {
            /// Reads every counter.
            pub fn snapshot(&self) -> $snap {
                $snap { $($f: self.$f.load(Relaxed)),* }
            }
        }

        impl $snap {
            /// Every counter with its name, in declaration order (for
            /// views that look at them by name without serializing).
            pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($f), self.$f)),*].into_iter()
            }
        }

        impl std::ops::AddAssign for $snap {
            fn add_assign(&mut self, o: $snap) {
                $(self.$f += o.$f;)*
            }
        }
    };
}

/// Adds `n` to a counter. Only the counter set's one writer calls this.
#[inline]
pub fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

counters! {
    /// Frames a guest sent (read from one TAP queue).
    IngressCounters / IngressStats {
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
        /// Dropped: virtio-net header malformed or not fitting the frame.
        drop_bad_vnet_header,
        /// Dropped: a header of the frame is malformed.
        drop_bad_frame,
        /// Dropped: a GSO frame asking for too many segments (tiny gso_size).
        drop_gso_segments,
        /// Dropped: security policy (forged source MAC, tagged frame on an access port).
        drop_policy,
        /// Dropped: no port to send to.
        drop_no_route,
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
        /// Source addresses not learned: the FDB's per-port or total limit,
        /// or another port's static address (the frame still goes out).
        fdb_learn_refused,
        /// Frames a tunnel endpoint consumed (ARP for its address).
        tunnel_control,
        /// ARP requests from a VM answered by the switch for a remote IP
        /// the fabric advertised (BGP EVPN), instead of being flooded.
        arp_suppressed,
        /// IPv6 neighbor solicitations answered the same way.
        nd_suppressed,
        /// Dropped: the port is disconnected (`connected = off`, a vNIC's
        /// cable pulled).
        drop_disconnected,
        /// VXLAN frames decapsulated (their inner frames then forwarded or
        /// dropped as any frame).
        decapsulated,
        /// Dropped at a tunnel endpoint: neither VXLAN to it nor ARP for it.
        drop_not_tunnel,
        /// Dropped: VXLAN without the I flag, truncated, or with an inner
        /// frame whose headers lie.
        drop_bad_vxlan,
        /// Dropped: VXLAN for another VNI.
        drop_vni,
        /// Dropped by the kernel before hvnet could read them: an uplink
        /// socket's buffer was full, or a frame could not be handed over
        /// with the socket's header (`PACKET_STATISTICS`).
        drop_kernel,
        /// Dropped: a vhost-user guest's transmit descriptor chain outside
        /// its memory, device-writable, longer than any frame or changed
        /// while read.
        drop_bad_descriptor,
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
    }
}

counters! {
    /// Frames the switch delivers to a guest receive queue.
    EgressCounters / EgressStats {
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
        /// Dropped: no ring-1 buffer.
        drop_ring1_full,
        /// Dropped: not enough ring-2 buffers.
        drop_ring2_full,
        /// Dropped: larger than this port's MTU (a GSO frame: its segments
        /// would be).
        drop_mtu_exceeded,
        /// Dropped: the write into the guest failed.
        drop_write_error,
        /// Dropped: the port was down.
        drop_port_down,
        /// Dropped: a vhost-user guest's receive virtqueue had no free
        /// buffer (the guest is not keeping up: its ring is full).
        drop_virtqueue_full,
        /// Dropped: no remote tunnel endpoint for the frame is resolved yet
        /// (ARP pending).
        drop_tunnel_unresolved,
        /// Times a sender waited for ring space (`rx_overflow = "backpressure"`).
        backpressure_waits,
        /// Batches the sender's worker delivered itself (the queue was idle).
        inline_batches,
    }
}

impl EgressStats {
    /// Frames offered but neither delivered nor dropped yet.
    pub fn in_flight(&self) -> i64 {
        self.offered as i64 - self.delivered_source_frames as i64 - self.drops() as i64
    }
    /// All drops.
    pub fn drops(&self) -> u64 {
        self.drop_ring1_full
            + self.drop_ring2_full
            + self.drop_mtu_exceeded
            + self.drop_write_error
            + self.drop_port_down
            + self.drop_virtqueue_full
            + self.drop_tunnel_unresolved
    }
}

impl IngressStats {
    /// All drops.
    pub fn drops(&self) -> u64 {
        self.drop_bad_vnet_header
            + self.drop_bad_frame
            + self.drop_gso_segments
            + self.drop_policy
            + self.drop_no_route
            + self.drop_not_tunnel
            + self.drop_bad_vxlan
            + self.drop_vni
            + self.drop_bad_descriptor
            + self.drop_kernel
            + self.drop_disconnected
    }
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
                + self.arp_suppressed
                + self.nd_suppressed
                + self.lro_merged()
    }
}
