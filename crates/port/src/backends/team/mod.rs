//! NIC teams: one uplink port over several devices (vSphere's NIC teaming,
//! Open vSwitch's bonds, Linux's bonding driver — which this machine's
//! kernel does not have, so the team is hvnet's own). Each member is an
//! ordinary uplink ([`UplinkPort`]: packet sockets, queues, fanout); the
//! team is a [`Device`] over them that picks a member per frame by its
//! policy on the way out ([`policy`], [`tx`]) and reads every member on
//! the way in, keeping what a physical switch sends back where it should
//! not come from ([`rx`]).
//!
//! Members fail by carrier, heard from the kernel as it changes
//! ([`links`]), and, with LACP, by their partner going quiet or leaving
//! the aggregate ([`lacp`]). When a VM's traffic moves to
//! another member the team announces it there ([`notify`]). The member
//! set's periodic work — carriers, LACP's timers and LACPDUs, aging of the
//! placements — runs on queue 0's tick ([`Receiver::tick`], every 100 ms)
//! and whenever the switch asks the team's link.

pub mod lacp;
mod links;
pub mod load;
pub mod notify;
pub mod policy;
mod rx;
mod state;
mod tx;

use crate::device::{Device, Link, Receiver, Transmitter, TxOptions};
use crate::filters::Filters;
use crate::status::{DeviceStatus, TeamStatus};
use crate::uplink::{LinkState, Spread, UplinkPort, UplinkRead};
use hvnet_sys::PacketError;
use hvnet_wire::MacAddr;
use lacp::{LacpMode, LacpRate};
use policy::Teaming;
use state::{Distribution, Inner, OwnMacs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// A team as the control plane opens it.
#[derive(Clone, Debug)]
pub struct TeamConfig {
    /// The members: each device and its own address (LACPDUs leave from it).
    pub members: Vec<(String, MacAddr)>,
    /// The policy.
    pub teaming: Teaming,
    /// `active-backup`: member indices in the order they are used.
    pub order: Vec<usize>,
    /// Traffic goes back to a member that is usable again (its home, or
    /// for `active-backup` the first in `order`).
    pub failback: bool,
    /// LACP's rate and mode.
    pub lacp_rate: LacpRate,
    /// Active or passive LACP.
    pub lacp_mode: LacpMode,
    /// Queues, the same on every member.
    pub queues: usize,
    /// How each member spreads its receive queues.
    pub spread: Spread,
    /// How each member's queues are read.
    pub read: UplinkRead,
}

/// One member: its uplink and its counters.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) mac: MacAddr,
    pub(crate) port: Arc<UplinkPort>,
    /// The carrier as last looked at: [`CARRIER_UP`], down or gone.
    pub(crate) carrier: AtomicU8,
    pub(crate) tx_frames: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    pub(crate) rx_frames: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
}

const CARRIER_UP: u8 = 0;
const CARRIER_DOWN: u8 = 1;
const CARRIER_GONE: u8 = 2;

/// The team's own drops (see [`crate::status::TeamDrops`]).
#[derive(Debug, Default)]
pub(crate) struct Drops {
    pub(crate) not_active_member: AtomicU64,
    pub(crate) looped: AtomicU64,
    pub(crate) not_collecting: AtomicU64,
    pub(crate) no_member: AtomicU64,
    pub(crate) lacp_malformed: AtomicU64,
    pub(crate) lacp_second_partner: AtomicU64,
    pub(crate) lacp_not_running: AtomicU64,
    pub(crate) lacp_too_many: AtomicU64,
}

impl Drops {
    /// One frame refused for `why`.
    pub(crate) fn count(&self, why: crate::vnet::TeamRefusal) {
        use crate::vnet::TeamRefusal as R;
        let c = match why {
            R::NotActiveMember => &self.not_active_member,
            R::Looped => &self.looped,
            R::NotCollecting => &self.not_collecting,
            R::LacpMalformed => &self.lacp_malformed,
            R::LacpSecondPartner => &self.lacp_second_partner,
            R::LacpNotRunning => &self.lacp_not_running,
            R::LacpTooMany => &self.lacp_too_many,
        };
        c.fetch_add(1, Relaxed);
    }
}

/// A team of uplink devices.
#[derive(Debug)]
pub struct TeamPort {
    label: String,
    teaming: Teaming,
    queues: usize,
    pub(crate) members: Vec<Member>,
    /// What the transmitters and receivers go by, replaced whole when the
    /// member set changes; `gen` moves with it.
    dist: RwLock<Arc<Distribution>>,
    gen: AtomicU64,
    /// The member set's state: placements, LACP, counters.
    pub(crate) inner: Mutex<Inner>,
    pub(crate) drops: Drops,
    /// Some member's carrier was up at the last look.
    any_up: AtomicBool,
    /// The addresses the team's VMs send from, as the receivers check
    /// them (the placements' addresses, changed as they come and go).
    own: RwLock<Arc<OwnMacs>>,
    /// How the members' queues are read.
    pub(crate) read: UplinkRead,
    /// Announcements sent for VMs whose traffic moved (frames).
    pub(crate) announced: AtomicU64,
}

impl TeamPort {
    /// Opens every member's queues (as an uplink's) and starts with the
    /// members whose carrier is up.
    pub fn open(cfg: TeamConfig) -> Result<TeamPort, PacketError> {
        let mut members = Vec::with_capacity(cfg.members.len());
        for (device, mac) in &cfg.members {
            let port = UplinkPort::open(device, cfg.queues, cfg.spread.clone(), cfg.read)?;
            members.push(Member {
                mac: *mac,
                port: Arc::new(port),
                carrier: AtomicU8::new(CARRIER_DOWN),
                tx_frames: AtomicU64::new(0),
                tx_bytes: AtomicU64::new(0),
                rx_frames: AtomicU64::new(0),
                rx_bytes: AtomicU64::new(0),
            });
        }
        let label = cfg
            .members
            .iter()
            .map(|(d, _)| d.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let inner = Inner::new(&cfg);
        let team = TeamPort {
            label,
            teaming: cfg.teaming,
            queues: cfg.queues.max(1),
            members,
            dist: RwLock::new(Arc::new(Distribution::none(cfg.members.len()))),
            gen: AtomicU64::new(0),
            inner: Mutex::new(inner),
            drops: Drops::default(),
            any_up: AtomicBool::new(false),
            own: RwLock::new(Arc::default()),
            read: cfg.read,
            announced: AtomicU64::new(0),
        };
        team.refresh(Instant::now());
        Ok(team)
    }

    /// The policy.
    pub fn teaming(&self) -> Teaming {
        self.teaming
    }

    /// The distribution now, and its generation.
    pub(crate) fn distribution(&self) -> (Arc<Distribution>, u64) {
        let gen = self.gen.load(std::sync::atomic::Ordering::Acquire);
        let d = Arc::clone(&self.dist.read().expect("team distribution lock"));
        (d, gen)
    }

    /// The generation of the distribution (moves when it is replaced).
    pub(crate) fn gen(&self) -> u64 {
        self.gen.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn publish(&self, d: Distribution) {
        *self.dist.write().expect("team distribution lock") = Arc::new(d);
        self.gen.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The addresses the team's VMs send from.
    pub(crate) fn own_macs(&self) -> Arc<OwnMacs> {
        Arc::clone(&self.own.read().expect("team addresses lock"))
    }

    /// Adds newly placed addresses to the team's own, and takes away
    /// forgotten ones (called under the team's lock, so in the order the
    /// placements changed). The set is changed in place unless a receiver
    /// holds it for its batch, then copied once (at most
    /// [`policy::MAX_PLACEMENTS`] addresses) — receivers read it without
    /// a lock per frame.
    pub(crate) fn change_own(&self, add: &[MacAddr], remove: &[MacAddr]) {
        if add.is_empty() && remove.is_empty() {
            return;
        }
        let mut own = self.own.write().expect("team addresses lock");
        let set = Arc::make_mut(&mut own);
        set.extend(add.iter().copied());
        for mac in remove {
            set.remove(mac);
        }
    }

    /// The member set's periodic work, at most every
    /// [`state::REFRESH_EVERY`] (several queues and the switch's link look
    /// may ask): carriers looked at, LACP's timers and LACPDUs, the
    /// distribution made again if it changed.
    pub fn refresh(&self, now: Instant) {
        let Ok(mut inner) = self.inner.try_lock() else {
            return;
        };
        if !inner.due(now) {
            return;
        }
        self.look(inner, now);
    }

    /// The member set's work now, whenever it was last done, if a member
    /// whose carrier was up has lost it (the kernel said a member's link
    /// changed). A member coming back waits for the next look, as
    /// Linux's bonding waits out its `updelay`: the physical switch's
    /// port that just came up may not forward yet, and the VMs
    /// announced on it then would stay unheard.
    fn refresh_now(&self, now: Instant) {
        let lost = self
            .members
            .iter()
            .any(|m| m.carrier.load(Relaxed) == CARRIER_UP && m.port.link_state() != LinkState::Up);
        if lost {
            let inner = self.inner.lock().expect("team lock");
            self.look(inner, now);
        }
    }

    fn look(&self, mut inner: std::sync::MutexGuard<'_, Inner>, now: Instant) {
        let mut up = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let c = match m.port.link_state() {
                LinkState::Up => CARRIER_UP,
                LinkState::Down => CARRIER_DOWN,
                LinkState::Gone => CARRIER_GONE,
            };
            m.carrier.store(c, Relaxed);
            up.push(c == CARRIER_UP);
        }
        self.any_up.store(up.iter().any(|&u| u), Relaxed);
        inner.age_out(self, now);
        inner.update(self, &up, now);
        let out = inner.take_outbox();
        drop(inner);
        self.send_outbox(out);
    }

    /// The members' interface indexes (what the kernel's link messages
    /// name).
    fn ifindexes(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.port.ifindex()).collect()
    }

    /// Sends what the member set's work made (LACPDUs, announcements),
    /// after the team's lock is let go: transmitters wait on it.
    fn send_outbox(&self, out: Vec<state::Outgoing>) {
        for o in out {
            if self.send_own(o.member, &o.frame) && o.announcement {
                self.announced.fetch_add(1, Relaxed);
            }
        }
    }

    /// Sends `frame` (without a virtio-net header) on member `m`, from the
    /// team's own work (LACPDUs, announcements). True if it left.
    pub(crate) fn send_own(&self, m: usize, frame: &[u8]) -> bool {
        let vnet = [0u8; crate::vnet::VNET_HDR_LEN];
        let slices = [std::io::IoSlice::new(&vnet), std::io::IoSlice::new(frame)];
        let fq = self.members[m].port.sender(0);
        matches!(hvnet_sys::send_frames(fq, &[&slices[..]]), Ok(1))
    }

    /// The team as views show it.
    pub fn team_status(&self) -> TeamStatus {
        let inner = self.inner.lock().expect("team lock");
        inner.status(self)
    }
}

impl Device for TeamPort {
    fn kind(&self) -> &'static str {
        "team+af_packet"
    }

    fn forget_sender(&self, mac: MacAddr) {
        let mut inner = self.inner.lock().expect("team lock");
        if inner.placements.forget(&mac) {
            self.change_own(&[], &[mac]);
        }
    }

    fn name(&self) -> &str {
        &self.label
    }

    fn num_queues(&self) -> usize {
        self.queues
    }

    fn faces_wire(&self) -> bool {
        true
    }

    /// Up while any member has carrier (its LACPDUs must be read even
    /// before the aggregate forms); gone once every member's device is.
    fn link(&self) -> Link {
        self.refresh(Instant::now());
        if self.any_up.load(Relaxed) {
            return Link::Up;
        }
        let gone = self
            .members
            .iter()
            .all(|m| m.carrier.load(Relaxed) == CARRIER_GONE);
        if gone {
            Link::Gone
        } else {
            Link::Down
        }
    }

    fn receiver(self: Arc<Self>, q: usize) -> Box<dyn Receiver> {
        Box::new(rx::TeamReceiver::new(self, q))
    }

    fn transmitter(self: Arc<Self>, q: usize, opts: TxOptions) -> Box<dyn Transmitter> {
        Box::new(tx::TeamTransmitter::new(self, q, opts))
    }

    fn status(&self) -> DeviceStatus {
        let first = &self.members[0].port;
        DeviceStatus {
            frames_per_read: Some(first.read_batch()),
            spread: Some(match first.status().spread {
                Some(s) => s,
                None => "flow hash",
            }),
            team: Some(self.team_status()),
            ..DeviceStatus::default()
        }
    }

    fn filters(&self) -> Option<Filters> {
        self.members[0].port.filters()
    }

    /// The same filters on every member (a VM's frames may come on any).
    fn set_filters(&self, f: Filters) -> Result<(), String> {
        for m in &self.members {
            m.port.set_filters(f.clone()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
