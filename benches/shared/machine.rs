//! What the benches say about the machine and a process, read from `/proc`
//! (Linux): shared by every bench binary through `#[path]`, so that each
//! figure names its CPU the same way.

#![allow(dead_code)]

/// The CPU's model name (`/proc/cpuinfo`), or `unknown`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// A `kB` field of a process's `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`),
/// `pid` `None` for this process; 0 when it cannot be read.
pub fn status_kb(pid: Option<u32>, field: &str) -> u64 {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0)
}
