//! Uplink ports: the switch's way out to the physical side, on an existing
//! Linux interface (a NIC; in tests and the lab, a veth whose other end is
//! an "external host"). Each receive queue is an AF_PACKET socket carrying
//! the same 12-byte virtio-net header as a TAP queue ([`hvnet_sys::packet`]),
//! so frames are read and checked exactly as a guest's are
//! ([`crate::tap::check`]); the sockets form a fanout group, so the kernel
//! spreads flows over the queues by their hash and each queue has its own
//! thread.
//!
//! The link follows the device: it is down while the device is down (the
//! sockets see `ENETDOWN` and then nothing), up again when the device comes
//! back, and gone for good when the device is deleted.

use crate::netqueue::{self, Filters};
use hvnet_sys::{Fanout, FrameQueue, PacketError};
use std::sync::Mutex;

/// An uplink: the packet sockets of one interface.
#[derive(Debug)]
pub struct UplinkPort {
    device: String,
    ifindex: u32,
    queues: Vec<FrameQueue>,
    /// NetQueue's filters, when the queues are spread by them (else by the
    /// kernel's flow hash).
    filters: Option<Mutex<Filters>>,
}

/// Where an uplink's device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Administratively and operationally up.
    Up,
    /// Present but down (or without carrier).
    Down,
    /// Deleted (or replaced by another device of the same name).
    Gone,
}

impl UplinkPort {
    /// Opens `queues` receive queues on `device`, spread by the kernel's
    /// flow hash, or by NetQueue's `filters` when given (and there are
    /// several queues).
    pub fn open(
        device: &str,
        queues: usize,
        filters: Option<Filters>,
    ) -> Result<UplinkPort, PacketError> {
        let filters = filters.filter(|_| queues > 1);
        let fanout = if filters.is_some() {
            Fanout::Program
        } else {
            Fanout::Hash
        };
        let queues = hvnet_sys::open_uplink(device, queues, fanout)?;
        let ifindex =
            hvnet_sys::packet::ifindex(device).ok_or(PacketError::NoDevice(device.into()))?;
        let port = UplinkPort {
            device: device.into(),
            ifindex,
            queues,
            filters: None,
        };
        match filters {
            None => Ok(port),
            Some(f) => {
                port.install(&f)?;
                Ok(UplinkPort {
                    filters: Some(Mutex::new(f)),
                    ..port
                })
            }
        }
    }

    fn install(&self, f: &Filters) -> Result<(), PacketError> {
        hvnet_sys::set_fanout_program(&self.queues[0], &netqueue::program(f)).map_err(|source| {
            PacketError::Sys {
                call: "PACKET_FANOUT_DATA",
                device: self.device.clone(),
                source,
            }
        })
    }

    /// NetQueue's filters now, if the queues are spread by filters.
    pub fn filters(&self) -> Option<Filters> {
        self.filters
            .as_ref()
            .map(|f| f.lock().expect("filters lock").clone())
    }

    /// Replaces the filters (at run time: the kernel switches programs
    /// atomically). Refused when the queues are spread by hash.
    pub fn set_filters(&self, f: Filters) -> Result<(), PacketError> {
        let Some(cur) = &self.filters else {
            return Err(PacketError::Sys {
                call: "set_filters",
                device: self.device.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "this uplink spreads its queues by flow hash, not by filters",
                ),
            });
        };
        let mut cur = cur.lock().expect("filters lock");
        self.install(&f)?;
        *cur = f;
        Ok(())
    }

    /// The interface.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Queue `i`.
    pub fn queue(&self, i: usize) -> &FrameQueue {
        &self.queues[i]
    }

    /// Number of receive queues.
    pub fn num_queues(&self) -> usize {
        self.queues.len()
    }

    /// The device's state now (from sysfs: its index, then `operstate`).
    pub fn link_state(&self) -> LinkState {
        let dir = std::path::Path::new("/sys/class/net").join(&self.device);
        let index = std::fs::read_to_string(dir.join("ifindex"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if index != Some(self.ifindex) {
            return LinkState::Gone;
        }
        match std::fs::read_to_string(dir.join("operstate")).as_deref() {
            // "unknown": a device that reports no operational state (tun,
            // dummy) is up when its flags say so.
            Ok("up\n") | Ok("unknown\n") => LinkState::Up,
            _ => LinkState::Down,
        }
    }
}
