//! crust-bench: drives any CRI endpoint (crust, containerd, CRI-O) and prints the median and p95
//! latency of each pod sandbox RPC, plus the memory a pod costs (RSS and PSS of the runtime's
//! processes for it, those that carry its id in their command line or sit in its own cgroup:
//! crust's monitor; containerd's shim and pause).
//!
//! crust-bench --endpoint unix:///run/crust/crust.sock --label crust --pods 30

#[path = "bench/common.rs"]
mod common;

use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use common::{pod_mem_kib, processes, report, report_mem, report_mem_pss, rss_kib};
use crust::cri::pb;
use crust::cri::pb::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

#[derive(Parser)]
#[command(about = "CRI pod sandbox latency and memory benchmark")]
struct Args {
    /// CRI endpoint (unix:///path or /path).
    #[arg(long)]
    endpoint: String,
    /// Name printed in front of every result line.
    #[arg(long, default_value = "runtime")]
    label: String,
    /// Sandboxes created and destroyed one after another (measured).
    #[arg(long, default_value_t = 30)]
    pods: usize,
    /// Unmeasured rounds first (caches, first bridge creation).
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Sandboxes kept alive together to measure per-pod memory and list latency.
    #[arg(long, default_value_t = 10)]
    alive: usize,
    /// Runtime handler to request.
    #[arg(long, default_value = "")]
    handler: String,
    /// The daemon's pid, to report its RSS.
    #[arg(long)]
    daemon_pid: Option<i32>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut c = crust::cri::client::runtime(&args.endpoint)
        .await
        .with_context(|| format!("connecting to {}", args.endpoint))?;
    let v = c.version(pb::VersionRequest::default()).await?.into_inner();
    println!(
        "# {}: {} {} (CRI {})",
        args.label, v.runtime_name, v.runtime_version, v.runtime_api_version
    );
    if let Some(pid) = args.daemon_pid {
        report_mem(&args.label, "daemon RSS idle", &[rss_kib(pid)?]);
    }
    let mut run = Vec::new();
    let mut stop_remove = Vec::new();
    let mut stop = Vec::new();
    for i in 0..args.warmup + args.pods {
        let config = pod_config(&format!("bench-{}-{i}", std::process::id()));
        let t = Instant::now();
        let id = c
            .run_pod_sandbox(pb::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: args.handler.clone(),
            })
            .await?
            .into_inner()
            .pod_sandbox_id;
        let ran = t.elapsed();
        let t = Instant::now();
        c.stop_pod_sandbox(pb::StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await?;
        let stopped = t.elapsed();
        c.remove_pod_sandbox(pb::RemovePodSandboxRequest { pod_sandbox_id: id })
            .await?;
        if i >= args.warmup {
            run.push(ran);
            stop.push(stopped);
            stop_remove.push(t.elapsed());
        }
    }
    report(&args.label, "RunPodSandbox", &run);
    report(&args.label, "StopPodSandbox", &stop);
    report(&args.label, "StopPodSandbox+RemovePodSandbox", &stop_remove);
    alive_phase(&mut c, &args).await
}

/// Keeps `alive` pods up together: status/list latency and per-pod memory.
async fn alive_phase(c: &mut RuntimeServiceClient<Channel>, args: &Args) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for i in 0..args.alive {
        let config = pod_config(&format!("bench-alive-{}-{i}", std::process::id()));
        let req = pb::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: args.handler.clone(),
        };
        ids.push(c.run_pod_sandbox(req).await?.into_inner().pod_sandbox_id);
    }
    let mut status = Vec::new();
    let mut list = Vec::new();
    for round in 0..50 {
        let id = ids[round % ids.len()].clone();
        let t = Instant::now();
        c.pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: id,
            verbose: false,
        })
        .await?;
        status.push(t.elapsed());
        let t = Instant::now();
        let n = c
            .list_pod_sandbox(pb::ListPodSandboxRequest { filter: None })
            .await?
            .into_inner()
            .items
            .len();
        list.push(t.elapsed());
        if n < ids.len() {
            bail!(
                "ListPodSandbox returned {n} pods, expected at least {}",
                ids.len()
            );
        }
    }
    report(&args.label, "PodSandboxStatus", &status);
    report(
        &args.label,
        &format!("ListPodSandbox ({} pods)", ids.len()),
        &list,
    );
    let all = processes();
    let per_pod: Vec<_> = ids.iter().map(|id| pod_mem_kib(&all, id)).collect();
    report_mem_pss(&args.label, "pod's own processes, no containers", &per_pod);
    if let Some(pid) = args.daemon_pid {
        report_mem(
            &args.label,
            &format!("daemon RSS with {} pods", ids.len()),
            &[rss_kib(pid)?],
        );
    }
    for id in ids {
        c.stop_pod_sandbox(pb::StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await?;
        c.remove_pod_sandbox(pb::RemovePodSandboxRequest { pod_sandbox_id: id })
            .await?;
    }
    Ok(())
}

/// A pod config shaped like kubelet's: per-container PID namespaces, cluster DNS, labels.
fn pod_config(name: &str) -> pb::PodSandboxConfig {
    pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: name.into(),
            uid: format!("{name}-uid"),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: format!("/var/log/pods/bench_{name}"),
        dns_config: Some(pb::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["bench.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: [("io.kubernetes.pod.name".to_owned(), name.to_owned())].into(),
        linux: Some(pb::LinuxPodSandboxConfig {
            security_context: Some(pb::LinuxSandboxSecurityContext {
                namespace_options: Some(pb::NamespaceOption {
                    pid: pb::NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
