//! Notifications both ways: whether the guest wants to be told of used
//! buffers, asking it to kick (or not) when it makes chains available,
//! and watching its ring for them without a kick.

use super::memory::GuestView;
use super::ring::Ring;
// The rings `on_ring!` picks between.
use super::{packed::PackedRing, split::SplitRing};
use super::{GuestMemoryMmap, Layout};
use virtio_queue::Queue;

/// Whether the guest wants to be told of used buffers now, the used side
/// having moved since `old` ([`used_mark`] when it was last told).
pub fn wants_signal(queue: &Queue, mem: &GuestMemoryMmap, layout: Layout, old: u16) -> bool {
    on_ring!(layout, R => R::of(queue).is_some_and(|ring| ring.wants_signal(&GuestView::new(mem), old)))
}

/// Where the used side of `queue` stands.
pub fn used_mark(queue: &Queue, layout: Layout) -> u16 {
    on_ring!(layout, R => R::of(queue).map_or(0, |ring| ring.used_mark()))
}

/// Asks the guest to kick when it makes more chains available, or not
/// to; on, true when some arrived meanwhile.
pub fn set_kicks(queue: &Queue, mem: &GuestMemoryMmap, layout: Layout, on: bool) -> bool {
    on_ring!(layout, R => R::of(queue).is_some_and(|ring| ring.set_kicks(&GuestView::new(mem), on)))
}

/// Watches the ring for up to `budget` without a system call; true as
/// soon as the guest made a chain available that was not taken. The
/// clock is read every 32 looks (a read costs more than a look).
pub fn wait_available(
    queue: &Queue,
    mem: &GuestMemoryMmap,
    layout: Layout,
    budget: std::time::Duration,
) -> bool {
    on_ring!(layout, R => {
        let Some(ring) = R::of(queue) else {
            return false;
        };
        let view = GuestView::new(mem);
        let start = std::time::Instant::now();
        for looks in 1u32.. {
            if ring.has_available(&view) {
                return true;
            }
            if looks % 32 == 0 && start.elapsed() >= budget {
                break;
            }
            std::hint::spin_loop();
        }
        false
    })
}
