//! Pod sandbox lifecycle against the real daemon: real namespaces, cgroups, CNI bridge.

mod common;

use common::*;
use crust::cri::pb;

#[tokio::test]
async fn pod_gets_namespaces_network_cgroup_dns_and_leaves_nothing_behind() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut config = pod_config("web");
    config.hostname = "web-host".into();
    config.labels.insert("app".into(), "web".into());
    config.annotations.insert("note".into(), "kept".into());
    config.dns_config = Some(pb::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["ns.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    config.linux = Some(pb::LinuxPodSandboxConfig {
        sysctls: [
            (
                "net.ipv4.ip_unprivileged_port_start".to_owned(),
                "0".to_owned(),
            ),
            ("kernel.shm_rmid_forced".to_owned(), "1".to_owned()),
        ]
        .into(),
        ..Default::default()
    });
    let id = run_pod(&mut c, config).await;
    assert_eq!(id.len(), 64);
    // With debug logs, each step's timing names the pod it belongs to.
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("CNI ADD done") && l.contains(&id)),
        "step timings carry the pod id:\n{log}"
    );

    let (s, info) = status(&mut c, &id).await;
    assert_eq!(s.state, pb::PodSandboxState::SandboxReady as i32);
    assert_eq!(s.metadata.unwrap().name, "web");
    assert_eq!(s.labels["app"], "web");
    assert_eq!(s.annotations["note"], "kept");
    let ip = s.network.unwrap().ip;
    assert!(
        ip.starts_with(&format!("{}.", d.subnet_prefix)),
        "pod IP {ip} is in the test subnet"
    );

    // Namespaces: the monitor lives in the pod's, which differ from the host's.
    let pid = info["monitor"]["pid"].as_i64().unwrap() as i32;
    for kind in ["net", "ipc", "uts"] {
        assert_ne!(
            ns_of(pid, kind),
            ns_of_self(kind),
            "{kind} namespace is the pod's own"
        );
    }
    for kind in ["net", "ipc", "uts", "pid"] {
        assert!(
            d.ns_dir().join(format!("{id}.{kind}")).exists(),
            "{kind} namespace is pinned"
        );
    }
    // The pod answers ping from the host through the bridge.
    sh("ping", &["-c", "1", "-W", "2", &ip]);
    // Hostname, sysctls and DNS are as asked.
    let pid_s = pid.to_string();
    assert_eq!(
        sh("nsenter", &["-t", &pid_s, "-u", "hostname"]).trim(),
        "web-host"
    );
    assert_eq!(
        sh(
            "nsenter",
            &[
                "-t",
                &pid_s,
                "-n",
                "cat",
                "/proc/sys/net/ipv4/ip_unprivileged_port_start"
            ]
        )
        .trim(),
        "0"
    );
    assert_eq!(
        sh(
            "nsenter",
            &[
                "-t",
                &pid_s,
                "-i",
                "cat",
                "/proc/sys/kernel/shm_rmid_forced"
            ]
        )
        .trim(),
        "1"
    );
    assert_eq!(
        std::fs::read_to_string(d.sandbox_dir(&id).join("resolv.conf")).unwrap(),
        "search ns.svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    );
    // The pod cgroup exists, empty until containers join it: the monitor lives in a cgroup
    // of crust's own, so a pod's memory limit never picks it.
    let pod_cgroup = format!("{}/crust-{id}", d.cgroup_parent);
    let procs = |path: &str| {
        std::fs::read_to_string(Daemon::cgroup_dir(path, "memory").join("cgroup.procs")).unwrap()
    };
    assert_eq!(
        procs(&pod_cgroup),
        "",
        "the pod cgroup holds no process of crust's"
    );
    let monitor_cgroup = format!("{}/monitors/{id}", d.cgroup_parent);
    assert!(
        procs(&monitor_cgroup).lines().any(|l| l == pid_s),
        "monitor {pid} is in its own cgroup: {}",
        procs(&monitor_cgroup)
    );
    assert_eq!(info["monitorCgroup"], monitor_cgroup.as_str());
    assert_eq!(d.allocated_ips(), std::slice::from_ref(&ip));

    // Stop: everything is released, the record stays.
    stop_pod(&mut c, &id).await;
    let s = c
        .pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(s.state, pb::PodSandboxState::SandboxNotready as i32);
    assert_eq!(s.network.unwrap().ip, "", "a stopped pod has no IP");
    assert!(exited(pid), "monitor is gone");
    assert!(
        d.allocated_ips().is_empty(),
        "IP released: {:?}",
        d.allocated_ips()
    );
    assert!(
        d.pod_cgroups().is_empty(),
        "cgroups left: {:?}",
        d.pod_cgroups()
    );
    assert_eq!(
        Daemon::entries(&d.ns_dir()),
        Vec::<String>::new(),
        "namespace pins removed"
    );
    assert!(d.veths().is_empty(), "veth removed: {:?}", d.veths());
    // Stop is idempotent.
    stop_pod(&mut c, &id).await;

    remove_pod(&mut c, &id).await;
    let list = c
        .list_pod_sandbox(pb::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    assert!(list.items.is_empty());
    assert!(!d.sandbox_dir(&id).exists());
    let ns_dir = d.ns_dir().to_string_lossy().into_owned();
    let pins: Vec<_> = d
        .mounts()
        .into_iter()
        .filter(|m| m.starts_with(&ns_dir) && *m != ns_dir)
        .collect();
    assert!(pins.is_empty(), "no namespace pin stays mounted: {pins:?}");
    remove_pod(&mut c, &id).await;
}

#[tokio::test]
async fn host_namespaces_are_shared_when_asked() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut config = pod_config("hostnet");
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Node,
        pb::NamespaceMode::Node,
        pb::NamespaceMode::Node,
    );
    let id = run_pod(&mut c, config).await;
    let (s, info) = status(&mut c, &id).await;
    let pid = info["monitor"]["pid"].as_i64().unwrap() as i32;
    for kind in ["net", "ipc", "uts", "pid_for_children"] {
        assert_eq!(ns_of(pid, kind), ns_of_self(kind), "{kind} is the host's");
    }
    assert_eq!(s.network.unwrap().ip, "", "no CNI for host network");
    let opts = s.linux.unwrap().namespaces.unwrap().options.unwrap();
    assert_eq!(opts.network, pb::NamespaceMode::Node as i32);
    assert!(d.allocated_ips().is_empty());
    assert!(Daemon::entries(&d.ns_dir()).is_empty(), "nothing to pin");
    remove_pod(&mut c, &id).await;
    assert!(d.monitors().is_empty());
    assert!(d.pod_cgroups().is_empty());
}

/// The value of `sysctl` (a path under /proc/sys) in the network namespace of `pid`.
fn net_sysctl(pid: i32, sysctl: &str) -> String {
    let pid = pid.to_string();
    let path = format!("/proc/sys/{sysctl}");
    sh("nsenter", &["-t", &pid, "-n", "cat", &path])
        .trim()
        .to_owned()
}

const PORT_START: &str = "net/ipv4/ip_unprivileged_port_start";
const PING_RANGE: &str = "net/ipv4/ping_group_range";

/// As containerd 2.x does by default, a pod with its own network may bind low ports and ping
/// as any user: `ip_unprivileged_port_start` 0 and `ping_group_range` "0 2147483647" in its
/// namespace, unless the pod sets them itself; the node's own values stay as they are.
#[tokio::test]
async fn pods_get_unprivileged_ports_and_icmp_unless_they_set_their_own() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let plain = run_pod(&mut c, pod_config("unpriv")).await;
    let pid = monitor_pid(&mut c, &plain).await;
    assert_ne!(ns_of(pid, "net"), ns_of_self("net"));
    assert_eq!(net_sysctl(pid, PORT_START), "0");
    assert_eq!(net_sysctl(pid, PING_RANGE), "0\t2147483647");

    let mut own = pod_config("own-sysctls");
    own.linux = Some(pb::LinuxPodSandboxConfig {
        sysctls: [
            ("net.ipv4.ip_unprivileged_port_start".into(), "900".into()),
            ("net.ipv4.ping_group_range".into(), "5 6".into()),
        ]
        .into(),
        ..Default::default()
    });
    let own = run_pod(&mut c, own).await;
    let pid = monitor_pid(&mut c, &own).await;
    assert_eq!(
        net_sysctl(pid, PORT_START),
        "900",
        "the pod's own value wins"
    );
    assert_eq!(
        net_sysctl(pid, PING_RANGE),
        "5\t6",
        "the pod's own value wins"
    );

    let node_sysctl = |sysctl: &str| {
        let path = format!("/proc/sys/{sysctl}");
        std::fs::read_to_string(path).unwrap().trim().to_owned()
    };
    let node = (node_sysctl(PORT_START), node_sysctl(PING_RANGE));
    let mut host = pod_config("hostnet-sysctls");
    with_namespaces(
        &mut host,
        pb::NamespaceMode::Node,
        pb::NamespaceMode::Container,
        pb::NamespaceMode::Pod,
    );
    let host = run_pod(&mut c, host).await;
    let pid = monitor_pid(&mut c, &host).await;
    assert_eq!(ns_of(pid, "net"), ns_of_self("net"));
    let after = (node_sysctl(PORT_START), node_sysctl(PING_RANGE));
    assert_eq!(
        after, node,
        "a host-network pod leaves the node's sysctls alone"
    );
    for id in [plain, own, host] {
        remove_pod(&mut c, &id).await;
    }
}

/// `enable_unprivileged_ports = false` and `enable_unprivileged_icmp = false` leave a pod's
/// network namespace with the kernel's defaults.
#[tokio::test]
async fn unprivileged_ports_and_icmp_can_be_turned_off() {
    let d = Daemon::prepare();
    d.append_config("enable_unprivileged_ports = false\nenable_unprivileged_icmp = false\n");
    d.write_bridge_network(&[]);
    let d = d.spawn();
    let mut c = d.client().await;
    let id = run_pod(&mut c, pod_config("kernel-defaults")).await;
    let pid = monitor_pid(&mut c, &id).await;
    assert_eq!(net_sysctl(pid, PORT_START), "1024");
    assert_eq!(net_sysctl(pid, PING_RANGE), "1\t0");
    remove_pod(&mut c, &id).await;
}

#[tokio::test]
async fn pod_pid_namespace_has_its_own_init() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut config = pod_config("pidshare");
    with_namespaces(
        &mut config,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Pod,
    );
    let id = run_pod(&mut c, config).await;
    let (_, info) = status(&mut c, &id).await;
    let init = info["monitor"]["init_pid"]
        .as_i64()
        .expect("pod has an init") as i32;
    let proc_status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap();
    let nspid = proc_status
        .lines()
        .find(|l| l.starts_with("NSpid:"))
        .unwrap();
    assert!(nspid.ends_with("\t1"), "init is PID 1 in the pod: {nspid}");
    assert_ne!(ns_of(init, "pid"), ns_of_self("pid"));
    stop_pod(&mut c, &id).await;
    assert!(exited(init), "init is gone");
    remove_pod(&mut c, &id).await;
}

#[tokio::test]
async fn list_filters_by_id_state_and_labels() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut ids = Vec::new();
    for (name, tier) in [("a", "front"), ("b", "back"), ("c", "front")] {
        let mut config = pod_config(name);
        config.labels.insert("tier".into(), tier.into());
        ids.push(run_pod(&mut c, config).await);
    }
    stop_pod(&mut c, &ids[2]).await;
    let list = |f: pb::PodSandboxFilter| {
        let mut c = c.clone();
        async move {
            let mut v: Vec<String> = c
                .list_pod_sandbox(pb::ListPodSandboxRequest { filter: Some(f) })
                .await
                .unwrap()
                .into_inner()
                .items
                .into_iter()
                .map(|p| p.metadata.unwrap().name)
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(list(Default::default()).await, ["a", "b", "c"]);
    assert_eq!(
        list(pb::PodSandboxFilter {
            id: ids[1].clone(),
            ..Default::default()
        })
        .await,
        ["b"]
    );
    assert_eq!(
        list(pb::PodSandboxFilter {
            id: ids[1][..12].to_owned(),
            ..Default::default()
        })
        .await,
        ["b"]
    );
    let ready = Some(pb::PodSandboxStateValue {
        state: pb::PodSandboxState::SandboxReady as i32,
    });
    assert_eq!(
        list(pb::PodSandboxFilter {
            state: ready,
            ..Default::default()
        })
        .await,
        ["a", "b"]
    );
    let front = [("tier".to_owned(), "front".to_owned())].into();
    assert_eq!(
        list(pb::PodSandboxFilter {
            label_selector: front,
            ..Default::default()
        })
        .await,
        ["a", "c"]
    );
    let front = [("tier".to_owned(), "front".to_owned())].into();
    assert_eq!(
        list(pb::PodSandboxFilter {
            label_selector: front,
            state: ready,
            ..Default::default()
        })
        .await,
        ["a"]
    );
    // A unique prefix works wherever an id does.
    let s = c
        .pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: ids[0][..8].to_owned(),
            verbose: false,
        })
        .await
        .unwrap();
    assert_eq!(s.into_inner().status.unwrap().id, ids[0]);
    for id in ids {
        remove_pod(&mut c, &id).await;
    }
    assert!(d.allocated_ips().is_empty());
}

#[tokio::test]
async fn port_mappings_reach_the_portmap_plugin() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut config = pod_config("ports");
    config.port_mappings = vec![pb::PortMapping {
        protocol: pb::Protocol::Tcp as i32,
        container_port: 80,
        host_port: 18080,
        host_ip: String::new(),
    }];
    let id = run_pod(&mut c, config).await;
    let rules = sh("iptables", &["-t", "nat", "-S"]);
    assert!(
        rules.contains("--dport 18080"),
        "portmap added a DNAT rule for 18080:\n{rules}"
    );
    remove_pod(&mut c, &id).await;
    let rules = sh("iptables", &["-t", "nat", "-S"]);
    assert!(
        !rules.contains("--dport 18080"),
        "portmap removed its rule on DEL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pods_get_distinct_addresses_and_all_clean_up() {
    let d = Daemon::start();
    let c = d.client().await;
    let log_root = d.dir.join("logs");
    let runs = (0..8).map(|i| {
        let mut c = c.clone();
        let mut config = pod_config(&format!("par{i}"));
        config.log_directory = log_root
            .join(format!("par{i}"))
            .to_string_lossy()
            .into_owned();
        tokio::spawn(async move {
            c.run_pod_sandbox(run_request(config))
                .await
                .map(|r| r.into_inner().pod_sandbox_id)
        })
    });
    let mut ids = Vec::new();
    for r in futures_util::future::join_all(runs).await {
        ids.push(r.unwrap().unwrap());
    }
    let mut ips = Vec::new();
    for id in &ids {
        let mut c = c.clone();
        let s = c
            .pod_sandbox_status(pb::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        ips.push(s.network.unwrap().ip);
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 8, "every pod has its own address: {ips:?}");
    assert_eq!(
        Daemon::entries(&log_root).len(),
        8,
        "log directories are created"
    );
    // Two stops and a remove race on every pod; all succeed and nothing is left.
    let teardown = ids.iter().flat_map(|id| {
        let stop = |c: &mut pb::runtime_service_client::RuntimeServiceClient<_>, id: String| {
            let mut c = c.clone();
            tokio::spawn(async move {
                c.stop_pod_sandbox(pb::StopPodSandboxRequest { pod_sandbox_id: id })
                    .await
                    .map(drop)
            })
        };
        let mut c = c.clone();
        let remove = {
            let mut c = c.clone();
            let id = id.clone();
            tokio::spawn(async move {
                c.remove_pod_sandbox(pb::RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
                    .map(drop)
            })
        };
        [stop(&mut c, id.clone()), stop(&mut c, id.clone()), remove]
    });
    for r in futures_util::future::join_all(teardown).await {
        r.unwrap().unwrap();
    }
    let mut c = c.clone();
    assert!(
        c.list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items
            .is_empty()
    );
    assert!(d.allocated_ips().is_empty());
    assert!(d.monitors().is_empty());
    assert!(d.pod_cgroups().is_empty());
    assert!(Daemon::entries(&d.ns_dir()).is_empty());
}

/// Moves `pid` into the pod cgroup `path` in every hierarchy that has it: on v2 into a leaf
/// `worker` of it (no process may sit in a cgroup that has children), on v1 into the pod
/// cgroup itself (a new v1 cpuset cgroup would have no CPUs).
fn join_pod_cgroup(path: &str, pid: u32) {
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let mut joined = 0;
    let roots = std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten();
    for root in roots
        .map(|e| e.path())
        .chain([std::path::PathBuf::from("/sys/fs/cgroup")])
    {
        let pod = root.join(path.trim_start_matches('/'));
        if pod.join("cgroup.procs").exists() {
            let leaf = if v2 { pod.join("worker") } else { pod };
            std::fs::create_dir_all(&leaf).unwrap();
            std::fs::write(leaf.join("cgroup.procs"), pid.to_string()).unwrap();
            joined += 1;
        }
    }
    assert!(joined > 0, "pod cgroup {path} not found");
}

#[tokio::test]
async fn pod_stats_measure_the_pod_cgroup_and_network() {
    use std::io::Write;
    let d = Daemon::start();
    let mut c = d.client().await;
    let mut config = pod_config("measured");
    config.labels.insert("app".into(), "measured".into());
    let id = run_pod(&mut c, config).await;
    let mut host = pod_config("measured-host");
    with_namespaces(
        &mut host,
        pb::NamespaceMode::Node,
        pb::NamespaceMode::Pod,
        pb::NamespaceMode::Pod,
    );
    let host_id = run_pod(&mut c, host).await;
    let (s, info) = status(&mut c, &id).await;
    sh("ping", &["-c", "2", "-W", "2", &s.network.unwrap().ip]);

    // A process in the pod cgroup that burns CPU and then stays, holding memory.
    let mut worker = std::process::Command::new("sh")
        .args([
            "-c",
            "read go; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 60",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    join_pod_cgroup(info["cgroup"].as_str().unwrap(), worker.id());
    writeln!(worker.stdin.as_mut().unwrap(), "go").unwrap();

    let stats = |id: &str| pb::PodSandboxStatsRequest {
        pod_sandbox_id: id.into(),
    };
    // Until the worker has burnt a millisecond (which takes longer under emulation).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let first = loop {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let s = c.pod_sandbox_stats(stats(&id)).await.unwrap().into_inner();
        let cpu = s.stats.as_ref().and_then(|s| s.linux.as_ref()?.cpu);
        let used = cpu
            .and_then(|c| c.usage_core_nano_seconds)
            .map_or(0, |u| u.value);
        if used > 1_000_000 || std::time::Instant::now() > deadline {
            break s;
        }
    };
    let second = c.pod_sandbox_stats(stats(&id)).await.unwrap().into_inner();
    let _ = worker.kill();
    let _ = worker.wait();
    let a = first.stats.unwrap();
    let attrs = a.attributes.unwrap();
    assert_eq!(attrs.id, id);
    assert_eq!(attrs.metadata.unwrap().name, "measured");
    assert_eq!(attrs.labels["app"], "measured");
    let linux = a.linux.unwrap();
    let cpu = linux.cpu.unwrap();
    assert!(
        cpu.usage_core_nano_seconds.unwrap().value > 1_000_000,
        "{cpu:?}"
    );
    assert!(cpu.timestamp > 0);
    let mem = linux.memory.unwrap();
    assert!(mem.working_set_bytes.unwrap().value > 0, "{mem:?}");
    assert!(mem.usage_bytes.unwrap().value >= mem.working_set_bytes.unwrap().value);
    // The worker: the monitor is not the pod's (it lives in a cgroup of crust's own).
    assert!(linux.process.unwrap().process_count.unwrap().value >= 1);
    let net = linux.network.unwrap();
    let eth0 = net.default_interface.unwrap();
    assert_eq!(eth0.name, "eth0");
    assert!(eth0.rx_bytes.unwrap().value > 0 && eth0.tx_bytes.unwrap().value > 0);
    let cores = second.stats.unwrap().linux.unwrap().cpu.unwrap();
    assert!(
        cores.usage_nano_cores.is_some(),
        "a rate from the second sample"
    );

    // The list: ready pods only, filtered by id prefix or labels; host network has no network.
    let list = |f: pb::PodSandboxStatsFilter| pb::ListPodSandboxStatsRequest { filter: Some(f) };
    let by_label = pb::PodSandboxStatsFilter {
        label_selector: [("app".to_owned(), "measured".to_owned())].into(),
        ..Default::default()
    };
    let got = c
        .list_pod_sandbox_stats(list(by_label))
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<_> = got
        .stats
        .iter()
        .map(|s| s.attributes.clone().unwrap().id)
        .collect();
    assert_eq!(ids, std::slice::from_ref(&id));
    let by_id = pb::PodSandboxStatsFilter {
        id: host_id[..12].into(),
        ..Default::default()
    };
    let got = c
        .list_pod_sandbox_stats(list(by_id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.stats.len(), 1);
    assert!(
        got.stats[0].linux.as_ref().unwrap().network.is_none(),
        "host network"
    );

    stop_pod(&mut c, &id).await;
    let e = c.pod_sandbox_stats(stats(&id)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("not ready"), "{e}");
    let all = c
        .list_pod_sandbox_stats(list(Default::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.stats.len(), 1, "stopped pods have no stats");
    let e = c.pod_sandbox_stats(stats("nope")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    remove_pod(&mut c, &id).await;
    remove_pod(&mut c, &host_id).await;
    d.assert_clean();
}

/// The node's neighbour entry for an address that a gone pod held, and a new pod now holds,
/// names the new pod's MAC once RunPodSandbox returns: the pod announces its address (a
/// gratuitous ARP). Without that, the kernel keeps sending to the old MAC until it probes the
/// address again 5 s later, and a kubelet probe with a 1 s timeout fails on the new pod.
#[tokio::test]
async fn a_reused_pod_address_points_at_the_new_pod_at_once() {
    let d = Daemon::start();
    let mut c = d.client().await;
    let first = run_pod(&mut c, pod_config("first")).await;
    let ip = status(&mut c, &first).await.0.network.unwrap().ip;
    // host-local hands out the next address: leave on the node the stale entry a gone pod
    // would have left for it.
    let last: u8 = ip.rsplit('.').next().unwrap().parse().unwrap();
    let next = format!("{}.{}", d.subnet_prefix, last + 1);
    let stale = "02:00:00:00:be:ef";
    sh(
        "ip",
        &[
            "neigh", "replace", &next, "lladdr", stale, "dev", &d.bridge, "nud", "stale",
        ],
    );
    let second = run_pod(&mut c, pod_config("second")).await;
    let (s, info) = status(&mut c, &second).await;
    assert_eq!(
        s.network.unwrap().ip,
        next,
        "host-local gave the next address"
    );
    let pin = info["namespaces"]["net"].as_str().unwrap();
    // `ip`, not /sys/class/net: sysfs shows the namespace of whoever mounted it.
    let link = sh(
        "nsenter",
        &[&format!("--net={pin}"), "ip", "-o", "link", "show", "eth0"],
    );
    let mac = link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC in {link:?}"));
    assert_ne!(mac, stale);
    // The announcement is handled by the node's stack as the packet arrives: wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let entry = sh("ip", &["neigh", "show", &next, "dev", &d.bridge]);
        if entry.contains(mac) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node's entry for {next} still names {entry:?}, not the new pod's {mac}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for id in [first, second] {
        stop_pod(&mut c, &id).await;
        remove_pod(&mut c, &id).await;
    }
}
