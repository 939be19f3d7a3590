//! Docker fixtures for the chaos tests: the engine (or why there is none), the
//! local images built by `scripts/images`, containers started through
//! testcontainers from those images (never pulled), signals and network
//! partitions through the bollard client that testcontainers re-exports, and
//! worker processes that die with the test.
//!
//! Every container and network carries the label [`LABEL`] with the test
//! process id, so that leftovers of a killed run are removed by the next one.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
pub use testcontainers::bollard;
use testcontainers::bollard::models::{
    EndpointSettings, NetworkConnectRequest, NetworkCreateRequest, NetworkDisconnectRequest,
    PortBinding,
};
use testcontainers::bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListNetworksOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers::core::WaitFor;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

/// The label on everything these fixtures create; its value is the test's pid.
pub const LABEL: &str = "distributor.chaos.pid";

/// `name:tag` from the environment variable `var` (as `scripts/images` reads it),
/// else `default`.
pub fn image_ref(var: &str, default: &str) -> (String, String) {
    let full = std::env::var(var).unwrap_or_else(|_| default.to_string());
    match full.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_string(), tag.to_string()),
        _ => (full, "latest".to_string()),
    }
}

/// The distributor image: the one `build_images` made for the binaries under
/// test, else `DISTRIBUTOR_IMAGE` or `local/distributor:dev`.
pub fn distributor_image() -> (String, String) {
    BUILT
        .get()
        .cloned()
        .unwrap_or_else(|| image_ref("DISTRIBUTOR_IMAGE", "local/distributor:dev"))
}

static BUILT: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();

pub fn redis_image() -> (String, String) {
    image_ref("REDIS_IMAGE", "local/redis:7")
}

/// A client of the local engine, or the reason why there is none. The engine
/// must answer within a few seconds.
pub async fn engine() -> Result<bollard::Docker, String> {
    let docker = bollard::Docker::connect_with_local_defaults()
        .map_err(|e| format!("no Docker client configuration: {e}"))?;
    match tokio::time::timeout(Duration::from_secs(5), docker.version()).await {
        Ok(Ok(v)) => {
            eprintln!(
                "docker engine {} (API {})",
                v.version.unwrap_or_default(),
                v.api_version.unwrap_or_default()
            );
            Ok(docker)
        }
        Ok(Err(e)) => Err(format!("the Docker engine does not answer: {e}")),
        Err(_) => Err("the Docker engine did not answer within 5s".into()),
    }
}

/// The example worker built beside the daemon binary under test
/// (`cargo test` builds examples; `scripts/images` runs `cargo build --example worker`).
pub fn worker_binary() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_distributor"))
        .parent()
        .expect("the binary has a directory")
        .join("examples/worker")
}

/// Builds the local images from the binaries under test with `scripts/images`
/// (no engine start, no cargo build, no pull). The distributor image is tagged
/// by the binaries' content (`t-<xxh3>`), so that test runs of different builds
/// at the same time never use each other's binaries. Fast when nothing changed.
pub fn build_images(distributor: &Path, worker: &Path) -> Result<(), String> {
    if !worker.exists() {
        return Err(format!(
            "no example worker at {} (run `cargo build --example worker`, or scripts/images)",
            worker.display()
        ));
    }
    let started = std::time::Instant::now();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for f in [distributor, worker] {
        h.update(&std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    let (name, _) = image_ref("DISTRIBUTOR_IMAGE", "local/distributor:dev");
    let tag = format!("t-{:016x}", h.digest128() as u64);
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/images"))
        .arg("--no-engine")
        .arg("--distributor")
        .arg(distributor)
        .arg("--worker")
        .arg(worker)
        .env("DISTRIBUTOR_IMAGE", format!("{name}:{tag}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run scripts/images: {e}"))?;
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("scripts/images failed ({}):\n{log}", out.status));
    }
    eprint!("{log}");
    eprintln!("images ready in {:.1?}", started.elapsed());
    let _ = BUILT.set((name, tag));
    Ok(())
}

/// Removes `t-*` tags of the distributor image older than an hour, except the
/// current one; an image that a container still uses is kept (no force).
pub async fn prune_test_images(docker: &bollard::Docker) {
    let (name, current) = distributor_image();
    let hour_ago = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64
        - 3600;
    let images = docker
        .list_images(None::<bollard::query_parameters::ListImagesOptions>)
        .await
        .unwrap_or_default();
    for image in images.into_iter().filter(|i| i.created < hour_ago) {
        for t in &image.repo_tags {
            if let Some(tag) = t.strip_prefix(&format!("{name}:"))
                && tag.starts_with("t-")
                && tag != current
            {
                let _ = docker
                    .remove_image(
                        t,
                        None::<bollard::query_parameters::RemoveImageOptions>,
                        None,
                    )
                    .await;
            }
        }
    }
}

fn pid_alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

/// The environment variable that marks processes spawned by [`Process`] with
/// the test's pid, so that a later run can end them if the test was killed.
pub const OWNER_ENV: &str = "DISTRIBUTOR_CHAOS_OWNER";

/// SIGKILLs processes that an earlier, killed test run spawned (their
/// [`OWNER_ENV`] names a pid that is gone). Only such processes are touched.
pub fn kill_orphans() {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let owner = env.split(|b| *b == 0).find_map(|kv| {
            std::str::from_utf8(kv)
                .ok()?
                .strip_prefix(OWNER_ENV)?
                .strip_prefix('=')
                .map(str::to_string)
        });
        if let Some(owner) = owner
            && !pid_alive(&owner)
        {
            let _ = Command::new("kill").args(["-KILL", &name]).status();
        }
    }
}

/// Removes containers and networks left by earlier runs whose process is gone.
pub async fn remove_leftovers(docker: &bollard::Docker) {
    kill_orphans();
    let filters = HashMap::from([("label", vec![LABEL])]);
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .unwrap_or_default();
    for c in containers {
        let owner = c.labels.as_ref().and_then(|l| l.get(LABEL)).cloned();
        if owner.is_some_and(|p| !pid_alive(&p))
            && let Some(id) = c.id
        {
            let _ = docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptionsBuilder::new().force(true).build()),
                )
                .await;
        }
    }
    let networks = docker
        .list_networks(Some(
            ListNetworksOptionsBuilder::new().filters(&filters).build(),
        ))
        .await
        .unwrap_or_default();
    for n in networks {
        let owner = n.labels.as_ref().and_then(|l| l.get(LABEL)).cloned();
        if owner.is_some_and(|p| !pid_alive(&p))
            && let Some(name) = n.name
        {
            let _ = docker.remove_network(&name).await;
        }
    }
}

/// A container request from a local image, labelled, never pulled (the image
/// must exist: `build_images` first).
pub fn local(image: &(String, String), name: &str) -> ContainerRequest<GenericImage> {
    GenericImage::new(image.0.clone(), image.1.clone())
        .with_wait_for(WaitFor::Nothing)
        .with_container_name(name)
        .with_label(LABEL, std::process::id().to_string())
        .with_startup_timeout(Duration::from_secs(60))
}

/// Publishes `container_port` on `127.0.0.1:host_port` only (testcontainers'
/// `with_mapped_port` would bind every interface).
pub fn publish_on_loopback(
    req: ContainerRequest<GenericImage>,
    host_port: u16,
    container_port: u16,
) -> ContainerRequest<GenericImage> {
    req.with_host_config_modifier(move |hc| {
        hc.publish_all_ports = Some(false);
        hc.port_bindings = Some(HashMap::from([(
            format!("{container_port}/tcp"),
            Some(vec![PortBinding {
                host_ip: Some("127.0.0.1".into()),
                host_port: Some(host_port.to_string()),
            }]),
        )]));
    })
}

/// Host networking: the container shares the host's loopback.
pub fn host_network(req: ContainerRequest<GenericImage>) -> ContainerRequest<GenericImage> {
    req.with_network("host").with_host_config_modifier(|hc| {
        hc.publish_all_ports = Some(false);
        hc.port_bindings = None;
    })
}

pub async fn start(req: ContainerRequest<GenericImage>) -> ContainerAsync<GenericImage> {
    let what = format!("{req:?}");
    match req.start().await {
        Ok(c) => c,
        Err(e) => panic!("could not start a container: {e}\n{what}"),
    }
}

/// Sends `signal` (`SIGKILL`, `SIGTERM`, ...) to the container's main process.
pub async fn signal(docker: &bollard::Docker, id: &str, signal: &str) {
    docker
        .kill_container(
            id,
            Some(KillContainerOptionsBuilder::new().signal(signal).build()),
        )
        .await
        .unwrap_or_else(|e| panic!("could not send {signal} to {id}: {e}"));
}

/// SIGKILL, for a teardown: a container that is not running (killed by
/// the scenario, or exited) is left as it is.
pub async fn kill_if_running(docker: &bollard::Docker, id: &str) {
    let sent = docker
        .kill_container(
            id,
            Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build()),
        )
        .await;
    if let Err(e) = sent
        && is_running(docker, id).await
    {
        panic!("could not send SIGKILL to {id}: {e}");
    }
}

pub async fn is_running(docker: &bollard::Docker, id: &str) -> bool {
    docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.running)
        .unwrap_or(false)
}

/// The exit code once the container stopped, else `None`.
pub async fn exit_code(docker: &bollard::Docker, id: &str) -> Option<i64> {
    let state = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .ok()?
        .state?;
    if state.running == Some(true) {
        None
    } else {
        state.exit_code
    }
}

/// The host pid of the container's main process (to enter its namespaces).
pub async fn pid(docker: &bollard::Docker, id: &str) -> u32 {
    docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.pid)
        .and_then(|p| u32::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or_else(|| panic!("container {id} has no running process"))
}

/// Runs the host's `iptables` with `args` inside the network namespace of the
/// process `pid` (a container's): rules there touch that container only.
/// Needs root, `nsenter` (util-linux) and `iptables` (Debian's docker.io
/// brings it; `scripts/images` installs it where it is missing).
pub fn iptables_in(pid: u32, args: &[&str]) -> Result<(), String> {
    let out = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "iptables", "-w", "5"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run nsenter (util-linux): {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let hint = if stderr.contains("No such file") {
        " (install iptables: scripts/images does)"
    } else {
        ""
    };
    Err(format!(
        "nsenter -t {pid} -n iptables {} failed ({}): {}{hint}",
        args.join(" "),
        out.status,
        stderr.trim()
    ))
}

/// One log line of a container, with the engine's receive time.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub at: SystemTime,
    pub text: String,
}

/// Every log line (stdout and stderr) of a container so far.
pub async fn logs(docker: &bollard::Docker, id: &str) -> Vec<LogLine> {
    let opts = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .timestamps(true)
        .build();
    let mut stream = docker.logs(id, Some(opts));
    let mut raw = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        raw.push_str(&chunk.to_string());
    }
    raw.lines()
        .map(|l| {
            let (ts, text) = l.split_once(' ').unwrap_or(("", l));
            LogLine {
                at: parse_rfc3339(ts).unwrap_or(SystemTime::UNIX_EPOCH),
                text: text.to_string(),
            }
        })
        .collect()
}

/// Parses `2025-01-02T03:04:05.123456789Z` (UTC, as Docker and tracing write it).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let nanos: u32 = format!("{:0<9}", &frac[..frac.len().min(9)]).parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(SystemTime::UNIX_EPOCH + Duration::new(u64::try_from(secs).ok()?, nanos))
}

/// A user-defined bridge network, removed on drop.
pub struct BridgeNetwork {
    docker: bollard::Docker,
    pub name: String,
    /// The host's address on this bridge: host processes listening here are
    /// reachable from the containers on it (and from the host).
    pub gateway: String,
}

impl BridgeNetwork {
    pub async fn create(docker: &bollard::Docker, name: &str) -> BridgeNetwork {
        docker
            .create_network(NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".into()),
                labels: Some(HashMap::from([(
                    LABEL.to_string(),
                    std::process::id().to_string(),
                )])),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("could not create network {name}: {e}"));
        let info = docker
            .inspect_network(name, None)
            .await
            .unwrap_or_else(|e| panic!("could not inspect network {name}: {e}"));
        let gateway = info
            .ipam
            .and_then(|i| i.config)
            .and_then(|c| c.into_iter().find_map(|c| c.gateway))
            .unwrap_or_else(|| panic!("network {name} has no gateway"));
        BridgeNetwork {
            docker: docker.clone(),
            name: name.to_string(),
            gateway,
        }
    }

    /// Cuts `container` off this network: its connections fail at once.
    pub async fn disconnect(&self, container: &str) {
        self.docker
            .disconnect_network(
                &self.name,
                NetworkDisconnectRequest {
                    container: container.to_string(),
                    force: Some(true),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("could not disconnect {container}: {e}"));
    }

    /// Connects `container` again, under `alias`.
    pub async fn connect(&self, container: &str, alias: &str) {
        self.connect_as(container, &[alias]).await;
    }

    /// Connects `container` under every one of `aliases` (DNS names on this
    /// network; its container name resolves anyway). An alias can only be
    /// given when connecting: to move one, disconnect and connect again.
    pub async fn connect_as(&self, container: &str, aliases: &[&str]) {
        self.docker
            .connect_network(
                &self.name,
                NetworkConnectRequest {
                    container: container.to_string(),
                    endpoint_config: Some(EndpointSettings {
                        aliases: Some(aliases.iter().map(|a| a.to_string()).collect()),
                        ..Default::default()
                    }),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("could not connect {container}: {e}"));
    }

    /// The container's IPv4 address on this network (the host reaches it).
    pub async fn address_of(&self, container: &str) -> String {
        let info = self
            .docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .unwrap_or_else(|e| panic!("could not inspect {container}: {e}"));
        info.network_settings
            .and_then(|n| n.networks)
            .and_then(|mut n| n.remove(&self.name))
            .and_then(|e| e.ip_address)
            .filter(|ip| !ip.is_empty())
            .unwrap_or_else(|| panic!("{container} has no address on {}", self.name))
    }

    /// Removes the network (its containers must be gone).
    pub async fn remove(&self) {
        let _ = self.docker.remove_network(&self.name).await;
    }
}

/// Removes the network; needs a multi-thread runtime (as testcontainers' own
/// drop does). Drop the containers on it first.
impl Drop for BridgeNetwork {
    fn drop(&mut self) {
        let handle = tokio::runtime::Handle::current();
        tokio::task::block_in_place(|| handle.block_on(self.remove()));
    }
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Process {
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Process {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Process {
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("could not open {}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        let child = cmd
            .env(OWNER_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("could not spawn {cmd:?}: {e}"));
        Process {
            child: Some(child),
            log,
        }
    }

    /// SIGKILL and reap. If it was running: the Unix µs just after the
    /// signal was sent, when it stopped doing anything. Not the reaping: its
    /// sockets close as it dies, and a holder moves its units within
    /// milliseconds of that, while this thread may be scheduled later.
    pub fn kill(&mut self) -> Option<u64> {
        let mut c = self.child.take()?;
        let running = c.try_wait().ok().flatten().is_none();
        let _ = c.kill();
        let sent = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_micros() as u64;
        let _ = c.wait();
        running.then_some(sent)
    }

    /// Whether it still runs (it did not exit or crash by itself).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
