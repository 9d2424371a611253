//! Receive filters a device may steer frames to its queues by (NetQueue:
//! [`crate::Device::set_filters`]): plain data, whatever programs them.

use hvnet_wire::MacAddr;
use serde::Serialize;

/// One filter: frames to `mac` go to `queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// Destination MAC (inner, for a tunnel endpoint).
    #[serde(serialize_with = "as_text")]
    pub mac: MacAddr,
    /// The receive queue.
    pub queue: u32,
}

fn as_text<S: serde::Serializer>(m: &MacAddr, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(m)
}

/// A filter table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Filters {
    /// Match the inner destination of VXLAN frames to this UDP port (the
    /// uplink is a tunnel endpoint) instead of the frame's own.
    pub tunnel: Option<u16>,
    /// The filters, first match wins.
    pub entries: Vec<Filter>,
}
