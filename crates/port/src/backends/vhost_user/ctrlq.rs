//! The control virtqueue of a virtio-net device: what the guest's driver
//! may change at run time — its receive mode and MAC filters (accepted:
//! the switch's own forwarding and security policy decide what a port
//! gets), the number of queue pairs it uses (`MQ`), and the offloads it
//! takes (`ethtool -K eth0 gro|lro off` in the guest, `GUEST_OFFLOADS`).
//! QEMU keeps this queue to itself; User-Mode Linux hands it to the back
//! end, which must answer every command or the guest's driver waits
//! forever.
//!
//! Pure over a `Queue` and guest memory, as [`super::virtq`].

use super::virtq::GuestMemoryMmap;
use virtio_bindings::virtio_net::*;
use virtio_queue::{Queue, QueueT};
use vm_memory::Bytes;

/// Longest command read (a MAC table of 256 entries and its headers).
const MAX_COMMAND: usize = 2 + 2 * (4 + 256 * 6);

/// A command from the guest's driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Receive mode, MAC table or address, VLAN filter, announcement
    /// acknowledged: accepted, nothing to change in the switch.
    Accepted,
    /// Use this many queue pairs.
    QueuePairs(u16),
    /// The offloads the guest takes now (feature bits: `GUEST_CSUM`,
    /// `GUEST_TSO4`, ...).
    GuestOffloads(u64),
    /// Malformed or not offered: refused.
    Refused,
}

/// Parses one command: class, command, data.
pub fn parse(bytes: &[u8]) -> Command {
    let (Some(&class), Some(&cmd)) = (bytes.first(), bytes.get(1)) else {
        return Command::Refused;
    };
    let data = &bytes[2..];
    match (u32::from(class), u32::from(cmd)) {
        (VIRTIO_NET_CTRL_RX, _) | (VIRTIO_NET_CTRL_MAC, _) | (VIRTIO_NET_CTRL_VLAN, _) => {
            Command::Accepted
        }
        (VIRTIO_NET_CTRL_ANNOUNCE, VIRTIO_NET_CTRL_ANNOUNCE_ACK) => Command::Accepted,
        (VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET) if data.len() >= 2 => {
            Command::QueuePairs(u16::from_le_bytes([data[0], data[1]]))
        }
        (VIRTIO_NET_CTRL_GUEST_OFFLOADS, VIRTIO_NET_CTRL_GUEST_OFFLOADS_SET) if data.len() >= 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&data[..8]);
            Command::GuestOffloads(u64::from_le_bytes(b))
        }
        _ => Command::Refused,
    }
}

/// Answers every command waiting on the control queue: each is read,
/// handed to `apply` (true: done), and answered with its status byte in
/// the chain's first device-writable buffer. Returns the commands served.
pub fn serve(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    apply: &mut dyn FnMut(Command) -> bool,
) -> usize {
    let mut served = 0;
    loop {
        served += serve_available(queue, mem, apply);
        // Ask for a kick on the next command (with the event index the
        // driver kicks only past the index written here); read on if one
        // came meanwhile.
        if !queue.enable_notification(mem).unwrap_or(false) {
            return served;
        }
    }
}

fn serve_available(
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
    apply: &mut dyn FnMut(Command) -> bool,
) -> usize {
    let mut served = 0;
    while let Some(chain) = queue.pop_descriptor_chain(mem) {
        let head = chain.head_index();
        let mut cmd = Vec::new();
        let mut status_at = None;
        let mut bad = false;
        for desc in chain {
            if desc.is_write_only() {
                if desc.len() >= 1 && status_at.is_none() {
                    status_at = Some(desc.addr());
                }
                continue;
            }
            let len = desc.len() as usize;
            if cmd.len() + len > MAX_COMMAND {
                bad = true;
                break;
            }
            let start = cmd.len();
            cmd.resize(start + len, 0);
            if mem.read_slice(&mut cmd[start..], desc.addr()).is_err() {
                bad = true;
                break;
            }
        }
        let ok = !bad && apply(parse(&cmd));
        let status = if ok { VIRTIO_NET_OK } else { VIRTIO_NET_ERR } as u8;
        let written = match status_at {
            Some(at) if mem.write_slice(&[status], at).is_ok() => 1,
            _ => 0,
        };
        let _ = queue.add_used(mem, head, written);
        served += 1;
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
    use virtio_queue::desc::{split::Descriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;
    use vm_memory::GuestAddress;

    fn d(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
        RawDescriptor::from(Descriptor::new(addr, len, flags, next))
    }

    #[test]
    fn commands_are_parsed_answered_and_applied() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
        let vq = MockSplitQueue::new(&mem, 16);
        let (next, write) = (VRING_DESC_F_NEXT as u16, VRING_DESC_F_WRITE as u16);
        // Set 2 queue pairs; then turn TSO off (only GUEST_CSUM left);
        // then a command of a class that does not exist.
        mem.write_slice(&[4, 0, 2, 0], GuestAddress(0x10_0000))
            .unwrap();
        let offloads = (1u64 << VIRTIO_NET_F_GUEST_CSUM).to_le_bytes();
        mem.write_slice(&[5, 0], GuestAddress(0x10_1000)).unwrap();
        mem.write_slice(&offloads, GuestAddress(0x10_1002)).unwrap();
        mem.write_slice(&[99, 0], GuestAddress(0x10_2000)).unwrap();
        vq.add_desc_chains(
            &[
                d(0x10_0000, 4, next, 1),
                d(0x11_0000, 1, write, 0),
                d(0x10_1000, 10, next, 3),
                d(0x11_0001, 1, write, 0),
                d(0x10_2000, 2, next, 5),
                d(0x11_0002, 1, write, 0),
            ],
            0,
        )
        .unwrap();
        let mut q: Queue = vq.create_queue().unwrap();
        let mut seen = Vec::new();
        let n = serve(&mut q, &mem, &mut |c| {
            seen.push(c);
            c != Command::Refused
        });
        assert_eq!(n, 3);
        assert_eq!(
            seen,
            [
                Command::QueuePairs(2),
                Command::GuestOffloads(1 << VIRTIO_NET_F_GUEST_CSUM),
                Command::Refused
            ]
        );
        let mut status = [9u8; 3];
        mem.read_slice(&mut status, GuestAddress(0x11_0000))
            .unwrap();
        assert_eq!(status, [0, 0, 1]);
        assert_eq!(q.next_used(), 3);
    }

    #[test]
    fn short_commands_are_refused() {
        assert_eq!(parse(&[]), Command::Refused);
        assert_eq!(parse(&[4, 0, 1]), Command::Refused);
        assert_eq!(parse(&[5, 0, 1, 2]), Command::Refused);
        assert_eq!(parse(&[0, 0, 1]), Command::Accepted);
    }
}
