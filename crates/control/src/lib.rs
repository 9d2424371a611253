//! hvnet's control plane: topology files, `up`/`down` and the switch
//! daemon, the control socket, and the operator views.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod acl_view;
pub mod balancer;
pub mod capture_stream;
pub(crate) mod ctl;
pub mod ctl_server;
pub mod daemon;
pub mod diagnose;
pub mod error;
pub mod evpn;
pub mod flow_spec;
pub mod guest;
pub mod libvirt;
pub mod mdb_view;
pub mod metrics;
pub mod proto;
mod provision;
pub mod reconcile;
pub mod rtnl;
pub mod state;
pub mod tc;
pub mod topology;
pub mod trace_far;
mod trace_lines;
mod trace_resolve;
pub mod trace_view;
pub mod views;
pub mod watch;
