//! The port's socket: listening on it or connecting to it, who may
//! connect, the relay and the serving thread a port starts, and closing
//! it all when the port is removed.

use super::backend::serve;
use super::relay::{Front, Relay};
use super::{Shared, VhostUserPort};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

/// Which side of the socket hvnet is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SocketMode {
    /// hvnet listens; the hypervisor connects (QEMU's `reconnect=1`
    /// chardev, libvirt's `mode='client'`).
    #[default]
    Server,
    /// The hypervisor listens; hvnet connects, and connects again with
    /// back-off whenever the connection or the socket goes away (Open
    /// vSwitch's `dpdkvhostuserclient`, libvirt's `mode='server'`): either
    /// side may restart.
    Client,
}

impl SocketMode {
    /// As topologies and views spell it.
    pub fn name(self) -> &'static str {
        match self {
            SocketMode::Server => "server",
            SocketMode::Client => "client",
        }
    }
}

/// Why a port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum VhostUserError {
    /// The socket could not be made.
    #[error("cannot listen on {0}: {1}")]
    Listen(PathBuf, String),
    /// An eventfd or the serving thread could not be made.
    #[error("vhost-user port: {0}")]
    Io(#[from] io::Error),
}

impl Drop for VhostUserPort {
    fn drop(&mut self) {
        self.close_socket();
    }
}

impl VhostUserPort {
    /// A port removed (`hvnet vm del`, a libvirt guest gone) takes its
    /// socket's thread, its connection and its descriptors with it: the
    /// thread, waiting for a front end or between attempts to reach one,
    /// sees the port closed and ends ([`crate::device::Device::close`], and the drop).
    pub(crate) fn close_socket(&self) {
        self.sh.closed.store(true, Ordering::Release);
        if let Some(l) = &self.sh.listener {
            // Wakes `accept` (EINVAL), which nothing else would.
            let _ = rustix::net::shutdown(l, rustix::net::Shutdown::Both);
        }
        if let Some(f) = self.sh.front.lock().expect("front lock").take() {
            let _ = f.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl VhostUserPort {
    /// Listens on `socket` for a guest's front end and serves it (and each
    /// one after it) on a thread of its own. `pairs` queue pairs; `mac`
    /// and `mtu` are what the device's configuration space tells the
    /// guest. The socket is root's only (whoever connects shares memory
    /// with the switch) until [`VhostUserPort::set_socket_access`] opens it.
    pub fn listen(
        name: &str,
        socket: &Path,
        pairs: usize,
        mac: [u8; 6],
        mtu: u16,
    ) -> Result<VhostUserPort, VhostUserError> {
        let listen_err = |e: io::Error| VhostUserError::Listen(socket.to_path_buf(), e.to_string());
        // Bind now, so that a guest started right after this returns finds
        // the socket; the serving thread accepts on it.
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).map_err(listen_err)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .map_err(listen_err)?;
        Self::open(name, socket, Front::Listen(listener), pairs, mac, mtu)
    }

    /// Connects to `socket`, which the hypervisor serves, and serves the
    /// front end there; when the connection ends or cannot be made, tries
    /// again (after 50 ms, doubling to 2 s while it keeps failing) for as
    /// long as the port lives. Returns at once: the port is down until a
    /// connection is made.
    pub fn connect(
        name: &str,
        socket: &Path,
        pairs: usize,
        mac: [u8; 6],
        mtu: u16,
    ) -> Result<VhostUserPort, VhostUserError> {
        Self::open(
            name,
            socket,
            Front::Connect(socket.to_path_buf()),
            pairs,
            mac,
            mtu,
        )
    }

    /// Sets who may connect to a listening port's socket: its owner and
    /// group (unchanged where `None`) and its mode (as `chmod`), so that a
    /// hypervisor that does not run as root (libvirt's QEMU runs as
    /// `libvirt-qemu`) can.
    pub fn set_socket_access(
        &self,
        owner: Option<u32>,
        group: Option<u32>,
        mode: u32,
    ) -> Result<(), VhostUserError> {
        let err = |e: io::Error| VhostUserError::Listen(self.socket.clone(), e.to_string());
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(&self.socket, owner, group).map_err(err)?;
        std::fs::set_permissions(&self.socket, std::fs::Permissions::from_mode(mode)).map_err(err)
    }

    fn open(
        name: &str,
        socket: &Path,
        front: Front,
        pairs: usize,
        mac: [u8; 6],
        mtu: u16,
    ) -> Result<VhostUserPort, VhostUserError> {
        let mode = match front {
            Front::Listen(_) => SocketMode::Server,
            Front::Connect(_) => SocketMode::Client,
        };
        let kicks = || -> io::Result<Vec<(EventConsumer, EventNotifier)>> {
            (0..pairs)
                .map(|_| new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC))
                .collect()
        };
        let sh = Arc::new(Shared {
            name: name.to_string(),
            pairs,
            mac,
            mtu,
            mem: RwLock::new(None),
            vrings: RwLock::new(vec![None; 2 * pairs]),
            acked: AtomicU64::new(0),
            offloads: AtomicU64::new(0),
            active_pairs: std::sync::atomic::AtomicUsize::new(0),
            connected: AtomicBool::new(false),
            changes: Mutex::new(None),
            tx_kick: kicks()?,
            rx_kick: kicks()?,
            connections: AtomicU64::new(0),
            memory_tables: AtomicU64::new(0),
            rx_signalled: (0..pairs).map(|_| Default::default()).collect(),
            announce: Mutex::new(Vec::new()),
            announcing: AtomicBool::new(false),
            announcements: AtomicU64::new(0),
            packed: AtomicBool::new(true),
            tx_holding: (0..pairs).map(|_| AtomicBool::new(false)).collect(),
            closed: AtomicBool::new(false),
            listener: match &front {
                Front::Listen(l) => Some(l.try_clone()?),
                Front::Connect(_) => None,
            },
            front: Mutex::new(None),
        });
        let listen_err = |e: io::Error| VhostUserError::Listen(socket.to_path_buf(), e.to_string());
        // The crate's side of the relay: an abstract socket, private to
        // this process in practice (its name is not on any file system).
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let inner = SocketAddr::from_abstract_name(format!(
            "hvnet-vhost-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
        .map_err(listen_err)?;
        let inner_listener = UnixListener::bind_addr(&inner).map_err(listen_err)?;
        let listener = Relay {
            public: front,
            inner: vhost::vhost_user::Listener::from(inner_listener),
            inner_addr: inner,
        };
        let sh2 = Arc::clone(&sh);
        std::thread::Builder::new()
            .name(format!("{name}_vhost"))
            .spawn(move || serve(sh2, listener))
            .map_err(VhostUserError::Io)?;
        Ok(VhostUserPort {
            socket: socket.to_path_buf(),
            mode,
            sh,
        })
    }

    /// The port's socket: where it listens, or what it connects to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Which side of the socket the port is.
    pub fn mode(&self) -> SocketMode {
        self.mode
    }
}
