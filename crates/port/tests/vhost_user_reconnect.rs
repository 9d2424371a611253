//! A front end that connects and goes away again and again (a guest in a
//! reboot loop, a hostile process on the socket) costs the switch nothing
//! that lasts: after hundreds of connections the port holds as many
//! descriptors and threads as after the first, and takes the next one.
//! (`vhost-user-backend` 0.24 leaks each event thread's exit event; the
//! port closes them once the connection's handler is gone.)

use hvnet_port::VhostUserPort;
use std::time::{Duration, Instant};
use vhost::vhost_user::Frontend;
use vhost::VhostBackend;

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// One front end that negotiates and leaves; returns once the port has
/// let it go.
fn visit(port: &VhostUserPort, sock: &std::path::Path) {
    let before = port.connections();
    let front = Frontend::connect(sock, 3).unwrap();
    front.set_owner().unwrap();
    let _ = front.get_features().unwrap();
    drop(front);
    eventually("the connection counted", || port.connections() > before);
    eventually("the disconnect", || !port.is_connected());
}

#[test]
fn hundreds_of_connections_leave_no_descriptor_or_thread_behind() {
    let sock = std::env::temp_dir().join(format!("hvnet-reconnect-{}.sock", std::process::id()));
    // Two queue pairs: two event threads, two exit events per connection.
    let port = VhostUserPort::listen("loop", &sock, 2, [2, 0, 0, 0, 0, 1], 1500).unwrap();
    for _ in 0..5 {
        visit(&port, &sock);
    }
    // The connection's threads end a moment after it is let go.
    std::thread::sleep(Duration::from_millis(100));
    let (fds, tasks) = (open_descriptors(), threads());
    for _ in 0..300 {
        visit(&port, &sock);
    }
    // Once the last connection's threads have ended and closed what they
    // held (a thread's end and its descriptors' closing are not one step).
    let settled = Instant::now() + Duration::from_secs(10);
    while (threads() > tasks + 2 || open_descriptors() > fds + 4) && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(2));
    }
    let (fds_after, tasks_after) = (open_descriptors(), threads());
    assert!(
        fds_after <= fds + 4,
        "descriptors: {fds} after 5 connections, {fds_after} after 305"
    );
    assert!(
        tasks_after <= tasks + 2,
        "threads: {tasks} after 5 connections, {tasks_after} after 305"
    );
    let _ = std::fs::remove_file(&sock);
}
