//! The mirrors as a worker last read them, resolved to port indexes:
//! which mirrors select what a port sends and what is sent to it, and
//! where each one's copies go.

use super::{Mirror, Output};
use crate::port_table::PortTable;
use hvnet_port::{Home, SizeClass};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Most mirrors a switch has (a bit each in a word per port).
pub const MAX_MIRRORS: usize = 64;

/// Where one mirror's copies go, resolved.
#[derive(Clone)]
pub(crate) enum Target {
    Port(usize),
    Vlan(u16),
    Erspan(Arc<crate::mirror::ErspanSender>),
    /// Its output port is not there (now).
    Nowhere,
}

/// The mirrors, resolved against a port table.
#[derive(Default)]
pub(crate) struct MirrorView {
    pub(crate) mirrors: Vec<Arc<Mirror>>,
    pub(crate) targets: Vec<Target>,
    /// Per port index: the mirrors selecting what it sends, and what is
    /// sent to it (bit i: mirror i).
    src: Vec<u64>,
    pub(crate) dst: Vec<u64>,
    vlans: Vec<(u16, u64)>,
    all: u64,
    /// Per RSPAN VLAN, its mirrors: frames on it are copies (from here
    /// or another switch) and are not selected by them.
    rspan: Vec<(u16, u64)>,
    /// Per port index: a mirror's output (nothing else goes to it).
    pub(crate) dedicated: Vec<bool>,
}

impl MirrorView {
    pub(crate) fn new(mirrors: &[Arc<Mirror>], t: &PortTable) -> MirrorView {
        let mut v = MirrorView {
            src: vec![0; t.len()],
            dst: vec![0; t.len()],
            dedicated: vec![false; t.len()],
            ..MirrorView::default()
        };
        let index = |name: &str| (0..t.len()).find(|&i| t.get(i).is_some_and(|p| p.name == name));
        for (i, m) in mirrors.iter().take(MAX_MIRRORS).enumerate() {
            let bit = 1u64 << i;
            let s = &m.spec;
            for p in s.select_src_port.iter().filter_map(|n| index(n)) {
                v.src[p] |= bit;
            }
            for p in s.select_dst_port.iter().filter_map(|n| index(n)) {
                v.dst[p] |= bit;
            }
            for &vlan in &s.select_vlan {
                match v.vlans.iter_mut().find(|(x, _)| *x == vlan) {
                    Some((_, b)) => *b |= bit,
                    None => v.vlans.push((vlan, bit)),
                }
            }
            if s.select_all {
                v.all |= bit;
            }
            v.targets.push(match &s.output {
                Output::Port(n) => index(n).map_or(Target::Nowhere, |p| {
                    v.dedicated[p] = true;
                    Target::Port(p)
                }),
                Output::Vlan(vlan) => {
                    v.rspan.push((*vlan, bit));
                    Target::Vlan(*vlan)
                }
                Output::Erspan(_) => m.erspan.clone().map_or(Target::Nowhere, Target::Erspan),
            });
            v.mirrors.push(Arc::clone(m));
        }
        v
    }

    /// True if a mirror selects what port `p` sends.
    pub(crate) fn selects_from(&self, p: usize) -> bool {
        self.src.get(p).is_some_and(|m| *m != 0) || self.all != 0 || !self.vlans.is_empty()
    }

    /// True if a mirror selects what is sent to port `p`.
    pub(crate) fn selects_to(&self, p: usize) -> bool {
        self.dst.get(p).is_some_and(|m| *m != 0)
    }

    /// The mirrors selecting a frame from `src` on `vlan` as it comes in.
    pub(crate) fn selecting_in(&self, src: usize, vlan: u16) -> u64 {
        let src = self.src.get(src).copied().unwrap_or(0);
        (src | self.all | on(&self.vlans, vlan)) & !on(&self.rspan, vlan)
    }
}

/// The mirrors listed for `vlan`.
fn on(list: &[(u16, u64)], vlan: u16) -> u64 {
    list.iter()
        .filter(|(v, _)| *v == vlan)
        .fold(0, |m, (_, b)| m | b)
}

/// True while under half the sending port's buffers of `class` are in
/// use: copies (held by a monitor that may stop reading) never take the
/// buffers its own frames need.
pub(crate) fn plenty(home: &Home, class: SizeClass) -> bool {
    let (s, caps) = (home.status(), home.caps());
    let (alive, idle, cap) = match class {
        SizeClass::Small => (s.small_alive, s.small_idle, caps.small),
        SizeClass::Large => (s.large_alive, s.large_idle, caps.large),
    };
    alive.saturating_sub(idle) < cap / 2
}

pub(crate) fn add_copy(m: &Mirror, bytes: usize) {
    m.copies.fetch_add(1, Relaxed);
    m.bytes.fetch_add(bytes as u64, Relaxed);
}
