//! What the frame-level code needs of a virtqueue, split or packed: the
//! next chain the guest made available, its descriptors, the chain
//! returned used, and the guest's notification settings. Both layouts
//! are read a burst at a time ([`super::split`], [`super::packed`]).

use super::memory::{GuestView, OutOfRange};
use virtio_queue::{Queue, QueueT};

/// One descriptor: a buffer in guest memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    /// The device writes it (a receive buffer); otherwise it reads it.
    pub write: bool,
}

/// Why a descriptor chain (or the ring) was refused; each is something
/// the guest's driver got wrong, and each is its own drop reason
/// (`tx_desc_loop`, `rx_desc_memory`, …), so that an operator sees which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DescriptorFault {
    /// A descriptor index past the table.
    #[error("descriptor index outside the table")]
    Index,
    /// More descriptors than the ring holds: the chain loops.
    #[error("descriptor chain loops")]
    Loop,
    /// An indirect descriptor inside an indirect table, one with `NEXT`
    /// set, or one that is not the chain's first.
    #[error("misplaced indirect descriptor")]
    Indirect,
    /// An indirect table whose length is not a whole number of
    /// descriptors, or longer than the queue (and 256).
    #[error("bad indirect table length")]
    IndirectLen,
    /// A descriptor, table or ring outside the guest's memory.
    #[error("address outside the guest's memory")]
    Memory,
    /// The available index moved by more than the queue holds.
    #[error("available index out of range")]
    AvailIndex,
    /// A device-writable buffer in a transmit chain, or a read-only one
    /// in a receive chain.
    #[error("buffer of the wrong direction")]
    Direction,
    /// A transmit chain longer than any frame (64 KiB and a header).
    #[error("transmit chain longer than any frame")]
    TooLong,
    /// A receive chain whose first buffer cannot hold the virtio-net
    /// header.
    #[error("receive buffer shorter than the virtio-net header")]
    Short,
}

impl DescriptorFault {
    /// Every fault, in order.
    pub const ALL: [DescriptorFault; 9] = [
        DescriptorFault::Index,
        DescriptorFault::Loop,
        DescriptorFault::Indirect,
        DescriptorFault::IndirectLen,
        DescriptorFault::Memory,
        DescriptorFault::AvailIndex,
        DescriptorFault::Direction,
        DescriptorFault::TooLong,
        DescriptorFault::Short,
    ];
}

impl From<OutOfRange> for DescriptorFault {
    fn from(_: OutOfRange) -> DescriptorFault {
        DescriptorFault::Memory
    }
}

/// Descriptor flags both layouts share.
pub(super) const F_NEXT: u16 = 1;
pub(super) const F_WRITE: u16 = 2;
pub(super) const F_INDIRECT: u16 = 4;
/// Bytes of a descriptor, in a table, a packed ring or an indirect table.
pub(super) const DESC_SIZE: u64 = 16;
/// Used elements kept before they are written out (a burst is smaller).
pub(super) const SHADOW: usize = 64;

/// A descriptor's address and length, and the two 16-bit fields after
/// them (split: flags, next; packed: buffer id, flags).
pub(super) fn read_raw(
    view: &GuestView<'_>,
    at: u64,
) -> Result<(u64, u32, u16, u16), DescriptorFault> {
    let raw: [u8; 16] = view.read_obj(at)?;
    let addr = u64::from_le_bytes(raw[0..8].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(raw[8..12].try_into().expect("4 bytes"));
    let a = u16::from_le_bytes([raw[12], raw[13]]);
    let b = u16::from_le_bytes([raw[14], raw[15]]);
    Ok((addr, len, a, b))
}

/// The entries of an indirect table `len` bytes long: whole descriptors,
/// at least one, no more than the queue's size (and no fewer than 256 may
/// be asked for: a small queue still takes a 64 KiB frame's pieces).
pub(super) fn indirect_entries(len: u32, queue_size: u16) -> Result<u32, DescriptorFault> {
    let n = len / DESC_SIZE as u32;
    if len == 0 || !len.is_multiple_of(DESC_SIZE as u32) || n > u32::from(queue_size).max(256) {
        return Err(DescriptorFault::IndirectLen);
    }
    Ok(n)
}

/// Where a ring's reading stands, to go back to (a frame that found too
/// few buffers leaves them available).
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    pub(super) next_avail: u16,
    pub(super) wrap: bool,
    pub(super) known: u16,
}

/// What giving a chain back used needs, kept past the burst that took
/// it: its id (split: its head) and the ring slots it took (packed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsedEntry {
    pub(super) id: u16,
    pub(super) slots: u16,
}

/// A virtqueue as a burst works it.
pub trait Ring: Sized {
    /// A chain taken: what [`Ring::descs`] and [`Ring::push_used`] need.
    type Head;

    /// The ring `queue` describes, where the last burst left it; `None`
    /// until the front end set it up.
    fn of(queue: &Queue) -> Option<Self> {
        if !queue.ready() {
            return None;
        }
        Self::open(queue)
    }

    /// [`Ring::of`] of a queue being stopped too (its last chains given
    /// back before it is).
    fn open(queue: &Queue) -> Option<Self>;

    /// Leaves the ring's position where the burst ended (after
    /// [`Ring::publish`]).
    fn save(&self, queue: &mut Queue);

    /// Takes the next chain the guest made available; `None` when there
    /// is none. An error is about the ring, not one chain.
    fn take(&mut self, view: &GuestView<'_>) -> Result<Option<Self::Head>, DescriptorFault>;

    /// Starts fetching the first buffer of the chain `ahead` places on
    /// from the next one to be taken (0: that one), if the guest made it
    /// available already (a hint: what is wrong with it is found when it
    /// is taken).
    fn prefetch(&self, _view: &GuestView<'_>, _ahead: u16) {}

    /// The chain's descriptors, checked as they are read.
    fn descs<'a>(
        &'a self,
        view: &'a GuestView<'_>,
        head: &'a Self::Head,
    ) -> impl Iterator<Item = Result<Desc, DescriptorFault>> + 'a;

    /// Returns a chain to the guest, `len` bytes written into it; the
    /// guest sees it at [`Ring::publish`].
    fn push_used(&mut self, view: &GuestView<'_>, head: &Self::Head, len: u32) {
        let entry = self.used_entry(head);
        self.push_entry(view, entry, len);
    }

    /// What giving `head` back needs, kept as long as it must be (a chain
    /// whose payload is read after its burst).
    fn used_entry(&self, head: &Self::Head) -> UsedEntry;

    /// Returns the chain `entry` stands for (see [`Ring::push_used`]); one
    /// an earlier burst took goes back after [`Ring::set_used_mark`].
    fn push_entry(&mut self, view: &GuestView<'_>, entry: UsedEntry, len: u32);

    /// Puts the used side at `mark` (a [`Ring::used_mark`]): where a
    /// burst that held its chains back left it.
    fn set_used_mark(&mut self, mark: u16);

    /// Publishes what [`Ring::push_used`] returned, in order.
    fn publish(&mut self, view: &GuestView<'_>);

    /// Where reading stands.
    fn mark(&self) -> Mark;

    /// Goes back to `mark` (the chains taken since are available again).
    fn rewind(&mut self, mark: Mark);

    /// Where the used side stands, for [`Ring::wants_signal`].
    fn used_mark(&self) -> u16;

    /// Whether the guest wants an interrupt for what was published since
    /// the used side stood at `old`.
    fn wants_signal(&self, view: &GuestView<'_>, old: u16) -> bool;

    /// Asks the guest to kick when it makes chains available (`on`) or
    /// not to; on, true when some arrived meanwhile.
    fn set_kicks(&self, view: &GuestView<'_>, on: bool) -> bool;

    /// True when the guest made a chain available that was not taken.
    fn has_available(&self, view: &GuestView<'_>) -> bool;
}
