//! Named network namespaces as iproute2 keeps them: a namespace is held
//! alive by a bind mount of its `nsfs` handle on `/run/netns/NAME`, so that
//! `ip netns exec NAME` and hvnet see the same namespaces. These are the
//! calls `ip netns add` and `ip netns del` make (iproute2's `ip/ipnetns.c`),
//! without a subprocess.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directory iproute2 keeps named namespaces in.
pub const NETNS_RUN_DIR: &str = "/run/netns";

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn mount(src: &CStr, target: &CStr, flags: libc::c_ulong) -> io::Result<()> {
    let none = c"none";
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call; a null `data` is allowed for bind and propagation changes.
    check(unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            none.as_ptr(),
            flags,
            std::ptr::null(),
        )
    })
}

/// Makes the run directory a shared mount point, as `ip netns add` does,
/// so that a namespace mounted in it is seen by every mount namespace that
/// shares it (and is unmounted from all of them by [`delete`]).
fn share_run_dir(dir: &CStr) -> io::Result<()> {
    let shared = libc::MS_SHARED | libc::MS_REC;
    match mount(c"", dir, shared) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // Not a mount point yet: bind it onto itself, then share it.
            mount(dir, dir, libc::MS_BIND | libc::MS_REC)?;
            mount(c"", dir, shared)
        }
        r => r,
    }
}

/// Creates the named namespace `name` (a fresh, empty network namespace
/// held by `/run/netns/NAME`). Fails with `AlreadyExists` when the name
/// is taken. The calling thread's own namespace is untouched: the new one
/// is made on a thread of its own.
pub fn create(name: &str) -> io::Result<()> {
    let dir = Path::new(NETNS_RUN_DIR);
    std::fs::create_dir_all(dir)?;
    share_run_dir(&cpath(dir)?)?;
    let path = path(name);
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let target = cpath(&path)?;
    let made = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare takes flags by value and touches no memory;
            // CLONE_NEWNET moves only this thread into a new namespace.
            check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
            // This thread's namespace, not the process's: /proc/self
            // would name the main thread's.
            mount(c"/proc/thread-self/ns/net", &target, libc::MS_BIND)
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    });
    if made.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    made
}

/// Deletes the named namespace `name`: its handle unmounted (lazily, as
/// `ip netns del` does: processes still inside keep it until they leave)
/// and its file removed. Its devices go with the namespace's last user.
pub fn delete(name: &str) -> io::Result<()> {
    let path = path(name);
    let target = cpath(&path)?;
    // SAFETY: `target` is a NUL-terminated string that outlives the call.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) })?;
    std::fs::remove_file(&path)
}

/// Where the handle of the named namespace `name` is.
pub fn path(name: &str) -> PathBuf {
    Path::new(NETNS_RUN_DIR).join(name)
}

/// Opens the handle of the named namespace `name`, for [`enter`],
/// [`run_in`] or a netlink request that moves a device into it.
pub fn open(name: &str) -> io::Result<File> {
    File::open(path(name))
}

/// Moves the calling thread (only it) into the network namespace whose
/// handle is `ns`: devices it then creates or opens, such as a TAP, and
/// sockets it opens are that namespace's.
pub fn enter(ns: &File) -> io::Result<()> {
    // SAFETY: setns takes an fd by value, which `ns` keeps open across the
    // call; CLONE_NEWNET limits it to the network namespace.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })
}

/// Runs `f` on a thread of its own inside the namespace of `ns`, so that
/// what it opens (sockets, TAP queues, `/proc/sys/net` files) is that
/// namespace's; the caller's thread stays where it is.
pub fn run_in<T: Send>(ns: &File, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root only (the system tests run as root): a namespace made here is
    /// a real one, distinct from ours, and is gone after `delete`.
    #[test]
    fn create_enter_delete() {
        if !crate::is_root() {
            return;
        }
        let name = format!("hvnet-sys-test-{}", std::process::id());
        create(&name).unwrap();
        assert!(matches!(
            create(&name).map_err(|e| e.kind()),
            Err(io::ErrorKind::AlreadyExists)
        ));
        let ours = std::fs::metadata("/proc/thread-self/ns/net").unwrap();
        let theirs = run_in(&open(&name).unwrap(), || {
            std::fs::metadata("/proc/thread-self/ns/net").unwrap()
        })
        .unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(ours.ino(), theirs.ino());
        delete(&name).unwrap();
        assert!(!path(&name).exists());
    }
}
