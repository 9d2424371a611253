//! What a device says of itself for views ([`crate::Device::status`], as
//! Open vSwitch's `netdev_get_status`): plain typed data, each part filled
//! by the kinds that have it, so that views never reach a backend's type.

use serde::Serialize;
use std::path::PathBuf;

/// What a device says of itself, each part typed ([`Device::status`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceStatus {
    /// A real guest's connection: what its driver accepted, its memory,
    /// its virtqueues.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vhost_user: Option<VhostUserStatus>,
    /// How a queue is read: frames per system call, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_per_read: Option<usize>,
    /// How frames are spread over receive queues (`netqueue`, `rss`,
    /// `flow hash`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<&'static str>,
    /// A team's members, their state, its partner and placements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<TeamStatus>,
}

impl DeviceStatus {
    /// The sizes of queue `q`'s virtqueues (receive, transmit), for a
    /// real guest's port.
    pub fn virtqueue_sizes(&self, q: usize) -> Option<(u16, u16)> {
        let vq = self.vhost_user.as_ref()?.virtqueues.get(q)?;
        Some((vq.rx, vq.tx))
    }
}

/// A real guest's connection as views show it ([`crate::Device::status`]).
#[derive(Clone, Debug, Serialize)]
pub struct VhostUserStatus {
    /// The socket's path.
    pub socket: PathBuf,
    /// Who listens (`server`: hvnet; `client`: the guest's VMM).
    pub mode: &'static str,
    /// A front end is connected now.
    pub connected: bool,
    /// Connections so far (a reconnecting guest adds one each time).
    pub connections: u64,
    /// Memory tables set so far.
    pub memory_tables: u64,
    /// Regions of the current memory table.
    pub memory_regions: usize,
    /// Guest memory the current table maps.
    pub memory_bytes: u64,
    /// The virtio features the driver acknowledged, in hex.
    pub acked_features: String,
    /// The virtqueue layout negotiated: `split` or `packed`.
    pub ring_layout: &'static str,
    /// The offloads the driver takes now.
    pub guest_offloads: GuestOffloads,
    /// The guest is here (not migrated away with its rings stopped).
    pub guest_present: bool,
    /// The front end logs dirty pages (live migration under way).
    pub dirty_logging: bool,
    /// RARP announcements sent for the guest after a migration.
    pub announcements: u64,
    /// Each queue pair's virtqueue sizes.
    pub virtqueues: Vec<VirtqueueSizes>,
}

/// One queue pair's virtqueue sizes (0 until the driver set them).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct VirtqueueSizes {
    /// The guest's receive virtqueue.
    pub rx: u16,
    /// The guest's transmit virtqueue.
    pub tx: u16,
}

/// What the guest's driver accepted, as the switch needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GuestOffloads {
    /// Takes frames with partial checksums (`GUEST_CSUM`).
    pub csum: bool,
    /// Takes TCP GSO frames whole (`GUEST_TSO4` and `GUEST_TSO6`).
    pub tso: bool,
    /// Its receive buffers may be chained into one frame (`MRG_RXBUF`).
    pub mergeable: bool,
}

/// A team of uplink devices as views show it (`hvnet team`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TeamStatus {
    /// The policy (`port-id`, `lacp`, …).
    pub teaming: &'static str,
    /// The members, in the team's order.
    pub members: Vec<TeamMemberStatus>,
    /// The member broadcasts and multicasts are taken from (and, for
    /// `active-backup`, the one member in use).
    pub active: Option<String>,
    /// With LACP: the aggregate's partner system and key.
    pub partner: Option<TeamPartner>,
    /// Times traffic moved off a member that stopped being usable.
    pub failovers: u64,
    /// Times it moved back to a member usable again (`failback`).
    pub failbacks: u64,
    /// VMs moved off a member busier than 75 % (`load-based`).
    pub rebalances: u64,
    /// Announcements sent for VMs whose traffic moved (frames).
    pub announcements: u64,
    /// Frames from the wire and from the switch dropped, by reason.
    pub drops: TeamDrops,
    /// The VM addresses it carries, each on its member.
    pub placements: Vec<TeamPlacement>,
    /// Frames from a new address not placed because the team had as many
    /// as it keeps (4096): they left by the address's hash, and the
    /// address is not the team's own (its frames back are not `looped`).
    pub placements_refused: u64,
}

/// One member's state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TeamMemberStatus {
    /// The device.
    pub device: String,
    /// Its address.
    pub mac: String,
    /// Up with carrier.
    pub carrier: bool,
    /// In the field's words: `active`, `standby`, `down`, or with LACP
    /// `distributing`, `collecting`, `not in aggregate`, `no partner`.
    pub state: &'static str,
    /// Frames and bytes sent and received.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames received (LACPDUs aside).
    pub rx_frames: u64,
    /// Times it stopped being usable.
    pub downs: u64,
    /// With LACP: the actor's and the partner's side.
    pub lacp: Option<TeamMemberLacp>,
}

/// A member's LACP state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TeamMemberLacp {
    /// `current`, `expired` or `defaulted`.
    pub partner_status: &'static str,
    /// The partner's system, priority, key and port.
    pub partner: TeamPartner,
    /// The partner's port number.
    pub partner_port: u16,
    /// The actor's state octet, in hex (802.1AX bits).
    pub actor_state: String,
    /// The partner's state octet.
    pub partner_state: String,
    /// LACPDUs received and taken.
    pub rx: u64,
    /// LACPDUs sent.
    pub tx: u64,
}

/// A LACP partner.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TeamPartner {
    /// System identifier.
    pub system: String,
    /// System priority.
    pub system_priority: u16,
    /// Operational key.
    pub key: u16,
}

/// A VM address the team carries.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TeamPlacement {
    /// The address.
    pub mac: String,
    /// The member it leaves by.
    pub member: String,
    /// The member it belongs on (it is elsewhere while that is down).
    pub home: String,
    /// Frames and bytes it sent through the team.
    pub frames: u64,
    /// Bytes.
    pub bytes: u64,
}

/// A team's own drops, each reason counted apart.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TeamDrops {
    /// From the wire on a member that is not the active one
    /// (`active-backup`; broadcasts and multicasts for the other
    /// switch-independent policies).
    pub not_active_member: u64,
    /// From the wire, sent by one of the team's own VMs: a frame the team
    /// sent on one member and the physical switch sent back on another.
    pub looped: u64,
    /// From the wire on a member LACP does not collect from.
    pub not_collecting: u64,
    /// To the wire with no usable member.
    pub no_member: u64,
    /// LACPDUs that did not parse.
    pub lacp_malformed: u64,
    /// LACPDUs from a second partner on a member whose partner is current.
    pub lacp_second_partner: u64,
    /// LACPDUs on a team that does not run LACP.
    pub lacp_not_running: u64,
    /// LACPDUs past three a second on one member (802.1AX's limit for a
    /// sender): a flood, not read.
    pub lacp_too_many: u64,
}
