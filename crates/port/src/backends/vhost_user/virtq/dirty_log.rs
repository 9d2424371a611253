//! The dirty log of a region of guest memory, cheap while nobody migrates.
//!
//! `vhost-user-backend`'s `BitmapMmapRegion` clones an `Arc` for every
//! slice of guest memory `vm-memory` makes (each descriptor read, each
//! frame written) and takes a read lock for every write, whether or not a
//! log is set: on two cores, with the port's threads touching the same
//! counters, that doubled a vhost-user frame's CPU. Here a slice borrows
//! its region's log (`RefSlice`), and a write looks at one flag that is
//! set only while a front end's log is in place and the guest is being
//! migrated; then the crate's bitmap marks the pages.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vhost_user_backend::bitmap::{AtomicBitmapMmap, BitmapMmapRegion, BitmapReplace};
use vm_memory::bitmap::{Bitmap, RefSlice, WithBitmapSlice};
use vm_memory::mmap::NewBitmap;

/// One region's log: the crate's replaceable bitmap behind a flag.
#[derive(Clone, Debug, Default)]
pub struct DirtyLog {
    /// True from the front end's `SET_LOG_BASE` until it turns `LOG_ALL`
    /// off again.
    logging: Arc<AtomicBool>,
    log: BitmapMmapRegion,
}

impl DirtyLog {
    /// Marks writes from now on (`LOG_ALL` on), or stops (off).
    pub fn set_logging(&self, on: bool) {
        self.logging.store(on, Ordering::Release);
    }
}

impl<'a> WithBitmapSlice<'a> for DirtyLog {
    type S = RefSlice<'a, DirtyLog>;
}

impl Bitmap for DirtyLog {
    fn mark_dirty(&self, offset: usize, len: usize) {
        if self.logging.load(Ordering::Acquire) {
            self.log.mark_dirty(offset, len);
        }
    }

    fn dirty_at(&self, offset: usize) -> bool {
        self.log.dirty_at(offset)
    }

    fn slice_at(&self, offset: usize) -> RefSlice<'_, DirtyLog> {
        RefSlice::new(self, offset)
    }
}

impl NewBitmap for DirtyLog {
    fn with_len(_len: usize) -> Self {
        Self::default()
    }
}

impl BitmapReplace for DirtyLog {
    type InnerBitmap = AtomicBitmapMmap;

    /// The front end's log for this region (`SET_LOG_BASE`): writes are
    /// marked from here on.
    fn replace(&self, bitmap: AtomicBitmapMmap) {
        self.log.replace(bitmap);
        self.set_logging(true);
    }
}
