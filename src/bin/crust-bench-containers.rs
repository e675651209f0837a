//! crust-bench-containers: drives any CRI endpoint (crust, containerd) through the container
//! lifecycle and prints medians and p95: CreateContainer, StartContainer, StopContainer,
//! RemoveContainer, ExecSync, a pod with a container from nothing; then kubelet's relist
//! (ListPodSandbox + ListContainers) and ContainerStatus with `--alive` pods of `--per-pod`
//! containers each, the memory (RSS and PSS) of the runtime's own processes for a pod alone,
//! without containers and with five running ones, and for each pod of the relist, a pod from
//! nothing and its removal on the relist's full node, and how
//! soon a GetContainerEvents subscriber hears of a container's exit. The pod from nothing is
//! measured twice: as a plain pod, then as one with its own user namespace (`hostUsers:
//! false`: a mapped range of host ids, the image's layers id-mapped). `--only-lifecycle` runs
//! the first rows alone (the NRI comparison of hack/bench.sh); `--only-from-nothing`,
//! `--only-memory` and `--only-relist` the pods from nothing, the memory rows and the relist;
//! `--only-checkpoint` checkpoint and restore (`bench/checkpoint.rs`), which the full run
//! leaves out.
//!
//! crust-bench-containers --endpoint unix:///run/crust/crust.sock --label crust \
//!   --image crust.bench/busybox:1

#[path = "bench/checkpoint.rs"]
mod checkpoint;
#[path = "bench/common.rs"]
mod common;
#[path = "bench/stream_exec.rs"]
mod stream_exec;
#[path = "bench/stream_portforward.rs"]
mod stream_portforward;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use common::{
    Mem, pod_mem_kib, processes, report, report_mem, report_mem_pss, report_rate, rss_kib,
};
use crust::cri::pb;
use crust::cri::pb::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

#[derive(Parser)]
#[command(about = "CRI container latency and memory benchmark")]
struct Args {
    #[arg(long)]
    endpoint: String,
    #[arg(long, default_value = "runtime")]
    label: String,
    /// An image with busybox (sh, sleep, true) the runtime already has.
    #[arg(long)]
    image: String,
    /// Containers created, started, stopped and removed one after another (measured).
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Pods kept alive together for the relist (kubelet's default max-pods).
    #[arg(long, default_value_t = 110)]
    alive: usize,
    /// Running containers in each of those pods.
    #[arg(long, default_value_t = 3)]
    per_pod: usize,
    /// Relists measured (each ListPodSandbox + ListContainers).
    #[arg(long, default_value_t = 100)]
    relists: usize,
    #[arg(long)]
    daemon_pid: Option<i32>,
    /// Execs of `true` over the streaming server (Exec RPC, SPDY stream, exit status).
    #[arg(long, default_value_t = 100)]
    stream_execs: usize,
    /// Measure only the execs over the streaming server.
    #[arg(long)]
    only_stream_execs: bool,
    /// Transfers into a pod through PortForward and SPDY, each beside a plain copy in the pod.
    #[arg(long, default_value_t = 7)]
    port_forwards: usize,
    /// MiB moved by each of those transfers.
    #[arg(long, default_value_t = 100)]
    port_forward_mib: usize,
    /// Measure only the port-forward transfers.
    #[arg(long)]
    only_port_forward: bool,
    /// Measure only the lifecycle (create, start, exec, stop, remove): hack/bench.sh runs it
    /// without and with an NRI plugin on the same daemon.
    #[arg(long)]
    only_lifecycle: bool,
    /// Measure only a pod with a container from nothing, plain and in a user namespace.
    #[arg(long)]
    only_from_nothing: bool,
    /// The runtime handler of the pods from nothing (a RuntimeClass's handler; empty: the
    /// runtime's default), to measure another OCI runtime under the same daemon.
    #[arg(long, default_value = "")]
    runtime_handler: String,
    /// Measure only the memory of a pod's own processes (alone, then with five containers).
    #[arg(long)]
    only_memory: bool,
    /// Measure only the relist (and the memory of each of its pods).
    #[arg(long)]
    only_relist: bool,
    /// Measure only checkpoint and restore of a container with 10 and 200 MiB of memory.
    #[arg(long)]
    only_checkpoint: bool,
    /// Checkpoints (and restores) measured for each size.
    #[arg(long, default_value_t = 5)]
    checkpoints: usize,
    /// Where the archives are written (on disk, as kubelet writes them).
    #[arg(long, default_value = "/var/tmp/crust-bench-checkpoints")]
    checkpoint_dir: String,
    /// Which ways the port-forward transfers go.
    #[arg(long, value_delimiter = ',', default_value = "up,down")]
    port_forward_ways: Vec<String>,
    /// Over which transports: spdy, websocket (SPDY tunnelled in WebSocket).
    #[arg(long, value_delimiter = ',', default_value = "spdy,websocket")]
    port_forward_transports: Vec<String>,
}

type Client = RuntimeServiceClient<Channel>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut c = crust::cri::client::runtime(&args.endpoint)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;
    if args.only_stream_execs {
        return stream_execs(&mut c, &args).await;
    }
    if args.only_port_forward {
        return port_forwards(&mut c, &args).await;
    }
    if args.only_lifecycle {
        return lifecycle(&mut c, &args).await;
    }
    if args.only_from_nothing {
        return pods_from_nothing(&mut c, &args).await;
    }
    if args.only_memory {
        return memory(&mut c, &args).await;
    }
    if args.only_checkpoint {
        return checkpoint::checkpoint_restore(&mut c, &args).await;
    }
    if args.only_relist {
        return relist(&mut c, &args).await;
    }
    lifecycle(&mut c, &args).await?;
    stream_execs(&mut c, &args).await?;
    port_forwards(&mut c, &args).await?;
    pods_from_nothing(&mut c, &args).await?;
    memory(&mut c, &args).await?;
    exit_events(&mut c, &args).await?;
    relist(&mut c, &args).await
}

/// `true` in a running container through Exec and a SPDY stream, one after another.
async fn stream_execs(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let pod = run_pod(c, "stream-exec").await?;
    let id = create_container(c, &pod, "sleeper", &args.image, SLEEPER).await?;
    start_container(c, &id).await?;
    // ExecSync in the same rounds: what the stream adds, on the same load.
    let (mut took, mut sync) = (Vec::new(), Vec::new());
    for i in 0..args.warmup + args.stream_execs {
        let t = stream_exec::round_trip(c, &id).await?;
        let s = Instant::now();
        c.exec_sync(pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            timeout: 10,
        })
        .await?;
        if i >= args.warmup {
            took.push(t);
            sync.push(s.elapsed());
        }
    }
    report(&args.label, "Exec over SPDY (true), no crictl", &took);
    report(&args.label, "ExecSync (true), same rounds", &sync);
    remove_pod(c, &pod).await
}

/// `--port-forward-mib` into and out of a pod through PortForward, over SPDY and over SPDY in
/// WebSocket, and the same over a plain connection inside the pod, in turns so that all see
/// the same load.
async fn port_forwards(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    use stream_portforward::{Direction, Transport};
    let pod = run_pod(c, "port-forward").await?;
    let id = create_container(c, &pod, "sleeper", &args.image, SLEEPER).await?;
    start_container(c, &id).await?;
    let netns = stream_portforward::netns_of(c, &id).await?;
    let port = stream_portforward::sink_in_netns(netns.clone())?;
    let total = args.port_forward_mib << 20;
    let ways = [("up", Direction::Up), ("down", Direction::Down)];
    let ways = ways
        .iter()
        .filter(|(n, _)| args.port_forward_ways.iter().any(|w| w == n));
    for &(way, dir) in ways {
        let mut transports: Vec<(&str, Transport, Vec<Duration>)> = [
            ("spdy", "SPDY", Transport::Spdy),
            ("websocket", "WebSocket", Transport::WebSocket),
        ]
        .into_iter()
        .filter(|(n, ..)| args.port_forward_transports.iter().any(|t| t == n))
        .map(|(_, shown, t)| (shown, t, Vec::new()))
        .collect();
        let mut plain = Vec::new();
        // One warm-up round: the first connection pays for page faults in every buffer.
        for i in 0..1 + args.port_forwards {
            let p = stream_portforward::plain(netns.clone(), port, total, dir).await?;
            let mut refused = Vec::new();
            for (shown, t, took) in &mut transports {
                match stream_portforward::through(c, &pod.0, port, total, (dir, *t)).await {
                    Ok(s) if i > 0 => took.push(s),
                    Ok(_) => {}
                    // containerd's stream server does not speak the WebSocket tunnel.
                    Err(e) if i == 0 => {
                        println!("{:<12} port-forward {way} ({shown}): {e}", args.label);
                        refused.push(*t);
                    }
                    Err(e) => return Err(e),
                }
            }
            transports.retain(|(_, t, _)| !refused.contains(t));
            if i > 0 {
                plain.push(p);
            }
        }
        let mib = args.port_forward_mib;
        for (shown, _, took) in &transports {
            let what = format!("port-forward {mib} MiB {way} ({shown})");
            report_rate(&args.label, &what, total, took, &plain);
        }
        let what = format!("plain loopback copy {way} in the pod");
        report_rate(&args.label, &what, total, &plain, &[]);
    }
    remove_pod(c, &pod).await
}

/// How long after a container's process died a GetContainerEvents subscriber hears of it:
/// from the exit time the runtime recorded at reaping (ContainerStatus.finished_at) to the
/// moment the STOPPED event reaches the client, on the same clock.
async fn exit_events(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let pod = run_pod(c, "events").await?;
    let mut events = c
        .get_container_events(pb::GetEventsRequest {})
        .await?
        .into_inner();
    let mut latency = Vec::new();
    for i in 0..args.warmup + args.rounds {
        let id = create_container(c, &pod, &format!("e{i}"), &args.image, "exit 0").await?;
        start_container(c, &id).await?;
        let heard = loop {
            let e = tokio::time::timeout(Duration::from_secs(10), events.message())
                .await
                .context("no STOPPED event within 10 s")??
                .context("the event stream ended")?;
            let stopped = pb::ContainerEventType::ContainerStoppedEvent as i32;
            if e.container_id == id && e.container_event_type == stopped {
                break wall_nanos();
            }
        };
        let finished = c
            .container_status(pb::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status
            .context("no status")?
            .finished_at;
        c.remove_container(pb::RemoveContainerRequest { container_id: id })
            .await?;
        if i >= args.warmup {
            let ns = u64::try_from(heard - finished).unwrap_or(0);
            latency.push(Duration::from_nanos(ns));
        }
    }
    report(&args.label, "exit to STOPPED event", &latency);
    remove_pod(c, &pod).await
}

fn wall_nanos() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_nanos() as i64)
}

/// One pod; containers created, started, exec'd into, stopped and removed one at a time.
async fn lifecycle(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let pod = run_pod(c, "lifecycle").await?;
    let (mut create, mut start, mut both) = (Vec::new(), Vec::new(), Vec::new());
    let (mut exec, mut stop, mut remove) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.warmup + args.rounds {
        let t = Instant::now();
        let id = create_container(c, &pod, &format!("c{i}"), &args.image, STOPPABLE).await?;
        let created = t.elapsed();
        let t2 = Instant::now();
        start_container(c, &id).await?;
        let started = t2.elapsed();
        let total = t.elapsed();
        let mut execs = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let r = c
                .exec_sync(pb::ExecSyncRequest {
                    container_id: id.clone(),
                    cmd: vec!["true".into()],
                    timeout: 10,
                })
                .await?
                .into_inner();
            if r.exit_code != 0 {
                bail!("ExecSync of true exited {}", r.exit_code);
            }
            execs.push(t.elapsed());
        }
        let t = Instant::now();
        c.stop_container(pb::StopContainerRequest {
            container_id: id.clone(),
            timeout: 10,
        })
        .await?;
        let stopped = t.elapsed();
        let t = Instant::now();
        c.remove_container(pb::RemoveContainerRequest { container_id: id })
            .await?;
        if i >= args.warmup {
            create.push(created);
            start.push(started);
            both.push(total);
            exec.extend(execs);
            stop.push(stopped);
            remove.push(t.elapsed());
        }
    }
    report(&args.label, "CreateContainer", &create);
    report(&args.label, "StartContainer", &start);
    report(&args.label, "CreateContainer+StartContainer", &both);
    report(&args.label, "ExecSync (true)", &exec);
    report(&args.label, "StopContainer (exits on SIGTERM)", &stop);
    report(&args.label, "RemoveContainer", &remove);
    remove_pod(c, &pod).await
}

/// A pod with a container from nothing, plain, then in a user namespace.
async fn pods_from_nothing(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    from_nothing(c, args, None).await?;
    if let Err(e) = from_nothing(c, args, Some(USERNS_HOST_ID)).await {
        // A runtime or node without user namespaces: that row is missing, the others stand.
        println!(
            "{:<12} pod + container from nothing, userns: not measured: {e:#}",
            args.label
        );
    }
    Ok(())
}

/// RunPodSandbox + CreateContainer + StartContainer, as kubelet does for a new pod; with
/// `userns`, the pod in a user namespace mapping 65536 ids from that host id, as kubelet maps
/// a `hostUsers: false` pod.
async fn from_nothing(c: &mut Client, args: &Args, userns: Option<u32>) -> anyhow::Result<()> {
    let mut total = Vec::new();
    for i in 0..args.warmup + args.rounds {
        let t = Instant::now();
        let pod = run_pod_in(c, &format!("fresh-{i}"), userns, &args.runtime_handler).await?;
        let started = match create_container(c, &pod, "main", &args.image, SLEEPER).await {
            Ok(id) => start_container(c, &id).await,
            Err(e) => Err(e),
        };
        if i >= args.warmup {
            total.push(t.elapsed());
        }
        // The pod goes whether its container started or not: a runtime that refuses it (a
        // handler the host cannot run) leaves nothing behind on the daemon.
        remove_pod(c, &pod).await?;
        started?;
    }
    let what = match userns {
        None => "pod + container from nothing",
        Some(_) => "pod + container from nothing, userns",
    };
    report(&args.label, what, &total);
    Ok(())
}

/// What the runtime's own processes for a pod hold (RSS and PSS), the pod alone on the runtime:
/// without containers, then with five running ones; the difference divided by five is what
/// each container costs them. Three pods one after another; medians.
async fn memory(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let (mut empty, mut five, mut each) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        let pod = run_pod(c, &format!("memory-{round}")).await?;
        settle().await;
        let without = pod_mem_kib(&processes(), &pod.0);
        for i in 0..5 {
            let id = create_container(c, &pod, &format!("m{i}"), &args.image, SLEEPER).await?;
            start_container(c, &id).await?;
        }
        settle().await;
        let with = pod_mem_kib(&processes(), &pod.0);
        empty.push(without);
        five.push(with);
        each.push(with.per(without, 5));
        remove_pod(c, &pod).await?;
    }
    report_mem_pss(&args.label, "pod alone, no containers", &empty);
    report_mem_pss(&args.label, "pod alone, 5 containers", &five);
    report_mem_pss(&args.label, "each container of that pod", &each);
    Ok(())
}

/// Gives the runtime time to settle after a change, as a node's pods spend most of their
/// life (crust's monitor lets go of the code it ran once it has been idle for a second).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// kubelet's relist every second: ListPodSandbox + ListContainers, and ContainerStatus, with
/// `--alive` pods of `--per-pod` running containers; then what a relist is made of (see
/// `relist_parts`) and what each of those pods costs the runtime's processes.
async fn relist(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let mut pods = Vec::new();
    let mut containers = Vec::new();
    for p in 0..args.alive {
        let pod = run_pod(c, &format!("alive-{p}")).await?;
        for i in 0..args.per_pod {
            let id = create_container(c, &pod, &format!("c{i}"), &args.image, SLEEPER).await?;
            start_container(c, &id).await?;
            containers.push(id);
        }
        pods.push(pod);
    }
    settle().await;
    let answers = relists(c, args, &containers).await?;
    if answers.0.items.len() < pods.len() || answers.1.containers.len() < containers.len() {
        bail!(
            "relist saw {} pods and {} containers",
            answers.0.items.len(),
            answers.1.containers.len()
        );
    }
    relist_parts(c, args, &answers).await?;
    // What each pod costs when the node is full: its processes share more pages then.
    let all = processes();
    let per_pod: Vec<Mem> = pods.iter().map(|p| pod_mem_kib(&all, &p.0)).collect();
    let what = format!("each pod of {} x {}", pods.len(), args.per_pod);
    report_mem_pss(&args.label, &what, &per_pod);
    if let Some(pid) = args.daemon_pid {
        let what = format!("daemon RSS, {} containers", containers.len());
        report_mem(&args.label, &what, &[rss_kib(pid)?]);
    }
    on_a_full_node(c, args).await?;
    for pod in &pods {
        remove_pod(c, pod).await?;
    }
    Ok(())
}

/// A new pod and its container on the full node (what kubelet asks of a node already running
/// its pods), and that pod's removal (StopPodSandbox + RemovePodSandbox): what grows with the
/// node's mounts and cgroups shows here and not on the empty runtime.
async fn on_a_full_node(c: &mut Client, args: &Args) -> anyhow::Result<()> {
    let (mut start, mut remove) = (Vec::new(), Vec::new());
    for i in 0..args.warmup + args.rounds {
        let t = Instant::now();
        let pod = run_pod(c, &format!("full-{i}")).await?;
        let id = create_container(c, &pod, "main", &args.image, SLEEPER).await?;
        start_container(c, &id).await?;
        let started = t.elapsed();
        let t = Instant::now();
        remove_pod(c, &pod).await?;
        if i >= args.warmup {
            start.push(started);
            remove.push(t.elapsed());
        }
    }
    report(&args.label, "full node: pod + container", &start);
    report(&args.label, "full node: pod stop + remove", &remove);
    Ok(())
}

type Relisted = (pb::ListPodSandboxResponse, pb::ListContainersResponse);

/// `--relists` relists, each followed by a ContainerStatus; returns the last relist's answers.
async fn relists(c: &mut Client, args: &Args, containers: &[String]) -> anyhow::Result<Relisted> {
    let (mut list, mut status) = (Vec::new(), Vec::new());
    let mut last = Default::default();
    for round in 0..args.relists {
        let t = Instant::now();
        let pods = c
            .list_pod_sandbox(pb::ListPodSandboxRequest { filter: None })
            .await?
            .into_inner();
        let listed = c
            .list_containers(pb::ListContainersRequest { filter: None })
            .await?
            .into_inner();
        list.push(t.elapsed());
        last = (pods, listed);
        let t = Instant::now();
        c.container_status(pb::ContainerStatusRequest {
            container_id: containers[round % containers.len()].clone(),
            verbose: false,
        })
        .await?;
        status.push(t.elapsed());
    }
    let what = format!("relist ({} pods x {})", args.alive, args.per_pod);
    report(&args.label, &what, &list);
    report(&args.label, "ContainerStatus", &status);
    Ok(last)
}

/// What a relist is made of besides the runtime's own work: this client decoding the two
/// answers (the same answers whatever the runtime, so the same time), and two RPCs that do
/// nothing (Version), the cost of a round trip through gRPC, HTTP/2 and the socket.
async fn relist_parts(c: &mut Client, args: &Args, answers: &Relisted) -> anyhow::Result<()> {
    use prost::Message;
    let (pods, containers) = (answers.0.encode_to_vec(), answers.1.encode_to_vec());
    let (mut decode, mut empty) = (Vec::new(), Vec::new());
    for _ in 0..args.relists {
        let t = Instant::now();
        let p = pb::ListPodSandboxResponse::decode(pods.as_slice())?;
        let k = pb::ListContainersResponse::decode(containers.as_slice())?;
        decode.push(t.elapsed());
        drop((p, k));
        let t = Instant::now();
        c.version(pb::VersionRequest::default()).await?;
        c.version(pb::VersionRequest::default()).await?;
        empty.push(t.elapsed());
    }
    let kib = (pods.len() + containers.len()) as f64 / 1024.0;
    report(
        &args.label,
        &format!("relist: decoding its {kib:.0} KiB"),
        &decode,
    );
    report(&args.label, "relist: two Version RPCs", &empty);
    Ok(())
}

/// Exits at once on SIGTERM (the shell's trap runs while it waits on its child).
const STOPPABLE: &str = "trap 'exit 0' TERM; sleep 3600 & wait";
const SLEEPER: &str = "sleep 3600";

type Pod = (String, pb::PodSandboxConfig);

/// The first host id of the benchmark's user namespace pods (kubelet hands out multiples of
/// 65536 above its own range; this one is clear of it).
const USERNS_HOST_ID: u32 = 1_000_000 / 65536 * 65536;

async fn run_pod(c: &mut Client, name: &str) -> anyhow::Result<Pod> {
    run_pod_in(c, name, None, "").await
}

/// A pod, in a user namespace of its own mapping 65536 ids from `userns` if given, under the
/// runtime handler `handler` (empty: the default).
async fn run_pod_in(
    c: &mut Client,
    name: &str,
    userns: Option<u32>,
    handler: &str,
) -> anyhow::Result<Pod> {
    let ids = |host_id| {
        vec![pb::IdMapping {
            container_id: 0,
            host_id,
            length: 65536,
        }]
    };
    let userns_options = userns.map(|host| pb::UserNamespace {
        mode: pb::NamespaceMode::Pod as i32,
        uids: ids(host),
        gids: ids(host),
    });
    let name = format!("cbench-{}-{name}", std::process::id());
    let config = pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: name.clone(),
            uid: format!("{name}-uid"),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: "bench".into(),
        log_directory: format!("/tmp/crust-bench-logs/{name}"),
        linux: Some(pb::LinuxPodSandboxConfig {
            security_context: Some(pb::LinuxSandboxSecurityContext {
                namespace_options: Some(pb::NamespaceOption {
                    pid: pb::NamespaceMode::Container as i32,
                    userns_options,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = c
        .run_pod_sandbox(pb::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.to_string(),
        })
        .await?
        .into_inner()
        .pod_sandbox_id;
    Ok((id, config))
}

async fn remove_pod(c: &mut Client, pod: &Pod) -> anyhow::Result<()> {
    c.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: pod.0.clone(),
    })
    .await?;
    c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
        pod_sandbox_id: pod.0.clone(),
    })
    .await?;
    Ok(())
}

async fn create_container(
    c: &mut Client,
    pod: &Pod,
    name: &str,
    image: &str,
    script: &str,
) -> anyhow::Result<String> {
    let config = pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into(), script.into()],
        log_path: format!("{name}.log"),
        linux: Some(pb::LinuxContainerConfig {
            security_context: Some(pb::LinuxContainerSecurityContext {
                namespace_options: Some(pb::NamespaceOption {
                    pid: pb::NamespaceMode::Container as i32,
                    // kubelet repeats the pod's user namespace in each container's options.
                    userns_options: pod_userns(pod),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(c.create_container(pb::CreateContainerRequest {
        pod_sandbox_id: pod.0.clone(),
        config: Some(config),
        sandbox_config: Some(pod.1.clone()),
    })
    .await?
    .into_inner()
    .container_id)
}

fn pod_userns(pod: &Pod) -> Option<pb::UserNamespace> {
    let sc = pod.1.linux.as_ref()?.security_context.as_ref()?;
    sc.namespace_options.as_ref()?.userns_options.clone()
}

async fn start_container(c: &mut Client, id: &str) -> anyhow::Result<()> {
    c.start_container(pb::StartContainerRequest {
        container_id: id.into(),
    })
    .await?;
    Ok(())
}
