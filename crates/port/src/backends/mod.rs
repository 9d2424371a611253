//! The backends: each kind of port behind the interface of
//! [`crate::device`], in a module of its own with what only it uses. A new
//! kind of port is written here alone; what several backends share (the
//! virtio-net header, buffers, writing to a file descriptor) stays beside
//! the interface.

pub mod replay;
pub mod tap;
pub mod team;
pub mod uplink;
pub mod vhost_user;
pub mod vxlan;
