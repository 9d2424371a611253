//! The port table, and ports that join and leave the switch at run time.
//!
//! The table is an immutable vector of slots, replaced whole under a lock
//! when a port comes or goes; everyone else holds an `Arc` of the table
//! they last read. A worker reads it again only when the switch's
//! generation moved (checked once per batch), so adding or removing a
//! port costs the datapath one pointer swap per worker, at a batch
//! boundary, and no lock per frame. A removed port's index is given to the
//! next port added; a worker's state for a destination remembers which
//! port it was made for, and is made afresh for the new one.

use crate::engine::{Port, PortSpec, PortState, Switch};
use crate::settings::Delivery;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The ports, by index; a removed port's slot stays empty until it is
/// reused.
#[derive(Clone, Default)]
pub struct PortTable {
    slots: Vec<Option<Arc<Port>>>,
}

impl PortTable {
    /// A table of `ports`, each at its index.
    pub fn new(ports: Vec<Arc<Port>>) -> PortTable {
        PortTable {
            slots: ports.into_iter().map(Some).collect(),
        }
    }

    /// The port at index `id`, if there is one.
    pub fn get(&self, id: usize) -> Option<&Arc<Port>> {
        self.slots.get(id).and_then(Option::as_ref)
    }

    /// Every port, in index order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Port>> {
        self.slots.iter().flatten()
    }

    /// Slots (the highest index in use, plus one).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no port is in the table.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Ports in the table.
    pub fn count(&self) -> usize {
        self.iter().count()
    }

    /// The index the next port takes.
    fn free_slot(&self) -> usize {
        self.slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len())
    }
}

impl std::ops::Index<usize> for PortTable {
    type Output = Arc<Port>;

    /// The port at `id`; only for an index a caller got from this very
    /// table (a worker's destinations), never from the FDB.
    fn index(&self, id: usize) -> &Arc<Port> {
        self.get(id).expect("a port of this table")
    }
}

/// Why a port was not added or removed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    /// A port of that name is on the switch already.
    #[error("a port named {0} is on the switch already")]
    Exists(String),
    /// No port of that name.
    #[error("no port named {0}")]
    NoPort(String),
}

/// How long a removal waits for the workers to let the port's queues go.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

impl Switch {
    /// The ports now.
    pub fn ports(&self) -> Arc<PortTable> {
        Arc::clone(&self.table.read().expect("ports lock"))
    }

    /// Adds a port while the switch runs: its own address pinned to it, its
    /// queues given to the workers (the least loaded), its delivery threads
    /// started if it asks for them. No other port's traffic is disturbed.
    pub fn add_port(self: &Arc<Switch>, spec: PortSpec) -> Result<Arc<Port>, TableError> {
        let _one = self.table_changes.lock().expect("table changes lock");
        let port = {
            let mut table = self.table.write().expect("ports lock");
            if table.iter().any(|p| p.name == spec.name) {
                return Err(TableError::Exists(spec.name));
            }
            let id = table.free_slot();
            let mut spec = spec;
            if let Some(e) = spec.endpoint.take() {
                self.endpoints.write().expect("lock").insert(id, e);
            }
            let port = Port::new(id, spec, self.pool_caps, &self.settings_gen);
            let mut next = PortTable::clone(&table);
            if id == next.slots.len() {
                next.slots.push(None);
            }
            next.slots[id] = Some(Arc::clone(&port));
            *table = Arc::new(next);
            port
        };
        if !port.is_uplink() {
            self.fdb.add_static(port.vlan(), port.mac, port.id);
        }
        self.settings_gen.fetch_add(1, Ordering::Release);
        if self.running.load(Ordering::Acquire) {
            self.workers.adopt_port(self, &port);
            if port.settings().shaped().delivery == Delivery::Thread {
                self.start_delivery(&port);
            }
        }
        tracing::info!(port = %port.name, id = port.id, queues = port.rxq.len(), "port added");
        Ok(port)
    }

    /// Removes a port while the switch runs: it goes down (frames to it
    /// are dropped and counted as `drop_port_down`), leaves the table, its
    /// queues leave their workers at the end of their current turn, and
    /// its FDB entries and multicast memberships go. Returns the port (its counters stay readable as
    /// long as the caller keeps it).
    pub fn remove_port(&self, name: &str) -> Result<Arc<Port>, TableError> {
        let _one = self.table_changes.lock().expect("table changes lock");
        let port = {
            let mut table = self.table.write().expect("ports lock");
            let Some(port) = table.iter().find(|p| p.name == name).cloned() else {
                return Err(TableError::NoPort(name.into()));
            };
            port.set_state(PortState::Removed);
            let mut next = PortTable::clone(&table);
            next.slots[port.id] = None;
            while next.slots.last().is_some_and(Option::is_none) {
                next.slots.pop();
            }
            *table = Arc::new(next);
            port
        };
        // Gone from the endpoints before the workers rebuild their arcs
        // (a switch without endpoints suppresses nothing).
        self.endpoints.write().expect("lock").remove(&port.id);
        self.settings_gen.fetch_add(1, Ordering::Release);
        self.workers.release_port(&port, RELEASE_WAIT);
        port.dev.close();
        self.fdb.remove_port(port.id);
        self.mdb.forget_port(port.id);
        // A team that carried its frames takes its address from the wire
        // again (the VM may be there now: migrated).
        // (Not while another VM has the address: in another VLAN.)
        let table = self.ports();
        if !port.is_uplink() && !table.iter().any(|p| !p.is_uplink() && p.mac == port.mac) {
            for p in table.iter().filter(|p| p.is_uplink()) {
                p.dev.forget_sender(port.mac);
            }
        }
        tracing::info!(port = %port.name, id = port.id, "port removed");
        Ok(port)
    }
}
