//! The switch's threads, and the supervisor each runs under.
//!
//! Threads, per port and queue `n` (named as cloud-hypervisor names them):
//! - `{port}_q{n}` ([`crate::worker`]) reads what the port's device sends
//!   on queue `n` in batches, forwards each frame and runs the offload
//!   stage for each destination (software LRO, ring placement), and at the
//!   end of the batch publishes what it staged for each destination queue
//!   — or, when that queue is idle and its port allows it, delivers it
//!   itself (run to completion);
//! - `{port}_rx{n}` ([`crate::deliver`]) is the guest's "vCPU" for
//!   receive: it drains receive queue `n`'s lanes into the device,
//!   segmenting GSO frames for a guest that does not take them whole and
//!   completing partial checksums for a guest without checksum offload;
//! - `fdb-aging` sweeps the FDB once a second.
//!
//! Every thread runs under a supervisor: a panic is logged and counted,
//! the thread starts again with fresh state, and after
//! [`MAX_RESTARTS`] failures the port is marked failed (shown in
//! `hvnet ports`), never silently dead.

use crate::switch::{Port, PortState, Switch, ThreadInfo};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Failures after which a port's thread is not started again.
pub const MAX_RESTARTS: u64 = 5;

impl Switch {
    /// Starts every worker and delivery thread, and the FDB aging thread.
    pub fn start(self: &Arc<Switch>) -> Vec<JoinHandle<()>> {
        let mut handles = Vec::new();
        for p in &self.ports {
            for q in 0..p.dev.num_queues() {
                let (sw, port) = (Arc::clone(self), Arc::clone(p));
                handles.push(supervised(
                    format!("{}_q{q}", p.name),
                    ("ingress", q),
                    sw,
                    port,
                    move |sw, port| crate::worker::Worker::new(sw, port, q).run(),
                ));
                let (sw, port) = (Arc::clone(self), Arc::clone(p));
                handles.push(supervised(
                    format!("{}_rx{q}", p.name),
                    ("delivery", q),
                    sw,
                    port,
                    move |sw, port| crate::deliver::deliver_loop(&sw, &port, q),
                ));
            }
        }
        let sw = Arc::clone(self);
        handles.push(
            std::thread::Builder::new()
                .name("fdb-aging".into())
                .spawn(move || {
                    while !sw.stopping() {
                        std::thread::sleep(Duration::from_millis(200));
                        sw.fdb.sweep(Instant::now(), None);
                        sw.pin_present_guests();
                    }
                })
                .expect("spawn fdb-aging"),
        );
        handles
    }
}

/// Runs `body` on a named thread, again after a panic (logged and counted
/// on the port), until it returns or the port failed too often.
fn supervised(
    name: String,
    (role, queue): (&'static str, usize),
    sw: Arc<Switch>,
    port: Arc<Port>,
    body: impl Fn(Arc<Switch>, Arc<Port>) + Send + 'static,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            port.threads.lock().expect("threads lock").push(ThreadInfo {
                name: name.clone(),
                tid: hvnet_sys::gettid(),
                role,
                queue,
            });
            supervise(&name, &sw, &port, &body);
            port.threads
                .lock()
                .expect("threads lock")
                .retain(|t| t.name != name);
        })
        .expect("spawn port thread")
}

fn supervise(
    name: &str,
    sw: &Arc<Switch>,
    port: &Arc<Port>,
    body: &impl Fn(Arc<Switch>, Arc<Port>),
) {
    loop {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            body(Arc::clone(sw), Arc::clone(port))
        }));
        if r.is_ok() || sw.stopping() {
            return;
        }
        let n = port.thread_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= MAX_RESTARTS {
            tracing::error!(port = %port.name, thread = %name, failures = n, "thread failed again; the port is marked failed");
            port.set_state(PortState::Failed);
            return;
        }
        tracing::error!(port = %port.name, thread = %name, failures = n, "thread failed; starting it again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Harness;
    use crate::settings::PortSettings;
    use crate::switch::SwitchConfig;
    use hvnet_wire::MacAddr;
    use std::sync::atomic::AtomicU64;

    /// A switch with one port, the port, and a run counter.
    fn one_port() -> (Harness, Arc<Port>, Arc<AtomicU64>) {
        let h = Harness::new(
            &[(MacAddr([2, 0, 0, 0, 0, 1]), 1, PortSettings::default())],
            SwitchConfig::default(),
        );
        let port = Arc::clone(&h.sw.ports[0]);
        (h, port, Arc::new(AtomicU64::new(0)))
    }

    #[test]
    fn a_thread_that_keeps_failing_is_restarted_then_its_port_marked_failed() {
        let (h, port, runs) = one_port();
        let r = Arc::clone(&runs);
        let t = supervised(
            "p0_test".into(),
            ("ingress", 0),
            Arc::clone(&h.sw),
            Arc::clone(&port),
            move |_, _| {
                r.fetch_add(1, Ordering::Relaxed);
                panic!("injected failure");
            },
        );
        t.join().unwrap();
        assert_eq!(
            runs.load(Ordering::Relaxed),
            MAX_RESTARTS,
            "started again after each failure"
        );
        assert_eq!(port.thread_failures.load(Ordering::Relaxed), MAX_RESTARTS);
        assert_eq!(port.state(), PortState::Failed);
        assert!(!port.is_up());
    }

    #[test]
    fn a_thread_that_fails_once_runs_again_and_the_port_stays_up() {
        let (h, port, runs) = one_port();
        let r = Arc::clone(&runs);
        supervised(
            "p0_test".into(),
            ("ingress", 0),
            Arc::clone(&h.sw),
            Arc::clone(&port),
            move |_, _| {
                if r.fetch_add(1, Ordering::Relaxed) == 0 {
                    panic!("injected failure");
                }
            },
        )
        .join()
        .unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        assert_eq!(port.thread_failures.load(Ordering::Relaxed), 1);
        assert_eq!(port.state(), PortState::Up);
    }
}
