//! A guest's share of the CPU, as esxtop's %RDY shows a VM's: how long
//! its threads waited to run (`/proc/PID/task/*/schedstat`, the run
//! queue delay), and whether a CPU quota held them (its cgroup's
//! `cpu.stat`, throttled time). A namespace VM's guest is the processes
//! in its network namespace; a real guest's, its QEMU or UML process group.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The CPU a guest's threads were given and were made to wait, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// Threads read.
    pub threads: usize,
    /// Nanoseconds they ran.
    pub run_ns: u64,
    /// Nanoseconds they were runnable and waited for a CPU (%RDY's).
    pub wait_ns: u64,
    /// Their CPU quotas (cgroup v1 `cpu`), by cgroup, each as a share
    /// of one core and its throttled time (nanoseconds) and periods.
    pub quotas: Vec<Quota>,
}

/// A CPU cgroup with a quota that holds some of the guest's threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    /// The cgroup's path under the `cpu` hierarchy.
    pub cgroup: String,
    /// Its quota over its period, in per cent of one core.
    pub percent: u64,
    /// Nanoseconds throttled so far.
    pub throttled_ns: u64,
    /// Periods throttled so far.
    pub throttled_periods: u64,
}

/// Where cgroup v1's `cpu` hierarchy is mounted.
const CPU_CGROUP: &str = "/sys/fs/cgroup/cpu";

/// The processes whose network namespace is `netns` (a file under
/// `/run/netns`, or a process's `ns/net`).
pub fn processes_in(netns: &Path) -> Vec<u32> {
    let Ok(want) = std::fs::metadata(netns) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| m.ino() == want.ino() && m.dev() == want.dev())
        })
        .collect()
}

/// The threads of `pids` read now.
pub fn sample(pids: &[u32]) -> CpuSample {
    let mut s = CpuSample::default();
    let mut cgroups = BTreeSet::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some((run, wait)) = hvnet_sys::schedstat(&t.path().join("schedstat")) else {
                continue;
            };
            s.threads += 1;
            s.run_ns += run;
            s.wait_ns += wait;
        }
        if let Some(cg) = cpu_cgroup(*pid) {
            cgroups.insert(cg);
        }
    }
    s.quotas = cgroups.into_iter().filter_map(|cg| quota(&cg)).collect();
    s
}

/// The process's cgroup in the `cpu` hierarchy (cgroup v1).
fn cpu_cgroup(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.to_string())
    })
}

/// A cgroup's quota, if it has one.
fn quota(cgroup: &str) -> Option<Quota> {
    let dir: PathBuf = Path::new(CPU_CGROUP).join(cgroup.trim_start_matches('/'));
    let num = |f: &str| -> Option<i64> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (q, period) = (num("cpu.cfs_quota_us")?, num("cpu.cfs_period_us")?);
    if q <= 0 || period <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
    let field = |k: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(Quota {
        cgroup: cgroup.to_string(),
        percent: (q * 100 / period) as u64,
        throttled_ns: field("throttled_time "),
        throttled_periods: field("nr_throttled "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_in_its_namespace_and_its_threads_read() {
        let me = std::process::id();
        let mine = processes_in(Path::new("/proc/self/ns/net"));
        assert!(mine.contains(&me), "{mine:?}");
        let s = sample(&[me]);
        assert!(s.threads >= 1 && s.run_ns > 0, "{s:?}");
    }
}
