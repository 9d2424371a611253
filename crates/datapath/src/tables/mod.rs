//! What the switch knows and looks up on the path: the FDB (where each
//! MAC address was learned), the MDB (the members of each multicast
//! group) and the DHCP leases snooped for each port.

pub mod fdb;
pub mod lease;
pub mod mdb;
