//! Metrics against the real daemon: the cAdvisor-named series of ListMetricDescriptors and
//! ListPodSandboxMetrics with their labels and real values, and crust's own Prometheus endpoint
//! scraped over HTTP and parsed with a Prometheus text parser.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::free_port;
use common::workload::Env;
use crust::cri::pb;

const BASE: [&str; 6] = ["container", "id", "image", "name", "namespace", "pod"];

fn labels(m: &pb::Metric, keys: &[String]) -> HashMap<String, String> {
    assert_eq!(m.label_values.len(), keys.len(), "{}", m.name);
    keys.iter()
        .cloned()
        .zip(m.label_values.iter().cloned())
        .collect()
}

#[tokio::test]
async fn descriptors_and_pod_metrics_have_cadvisor_names_labels_and_values() {
    let mut e = Env::start().await;
    let descs =
        e.c.list_metric_descriptors(pb::ListMetricDescriptorsRequest {})
            .await
            .unwrap()
            .into_inner()
            .descriptors;
    let keys: HashMap<String, Vec<String>> = descs
        .iter()
        .map(|d| (d.name.clone(), d.label_keys.clone()))
        .collect();
    for (name, extra) in [
        ("container_cpu_usage_seconds_total", &["cpu"][..]),
        ("container_memory_working_set_bytes", &[]),
        ("container_memory_rss", &[]),
        ("container_oom_events_total", &[]),
        ("container_network_receive_bytes_total", &["interface"]),
        ("container_network_transmit_bytes_total", &["interface"]),
        ("container_fs_usage_bytes", &["device"]),
        ("container_processes", &[]),
        ("container_start_time_seconds", &[]),
        ("container_spec_memory_limit_bytes", &[]),
        (
            "container_memory_failures_total",
            &["failure_type", "scope"],
        ),
    ] {
        let want: Vec<&str> = BASE.iter().copied().chain(extra.iter().copied()).collect();
        assert_eq!(keys.get(name).unwrap_or_else(|| panic!("no {name}")), &want);
    }
    assert!(descs.iter().all(|d| !d.help.is_empty()));

    let pod = e.pod("measured").await;
    let mut config = e.config("app", &["sleep", "3600"]);
    config.linux.get_or_insert_with(Default::default).resources =
        Some(pb::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            cpu_period: 100_000,
            cpu_quota: 20_000,
            ..Default::default()
        });
    let id = e.run(&pod, config).await;
    e.sh(
        &id,
        "dd if=/dev/zero of=/dev/shm/x bs=1M count=8 2>/dev/null; echo hi > /f",
    )
    .await;
    let info = e.info(&id).await;
    let cgroup = info["cgroup"].as_str().unwrap().to_owned();
    let all =
        e.c.list_pod_sandbox_metrics(pb::ListPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_metrics;
    let p = all
        .iter()
        .find(|p| p.pod_sandbox_id == pod.0)
        .expect("the pod's metrics");
    assert_eq!(p.container_metrics.len(), 1);
    let c = &p.container_metrics[0];
    assert_eq!(c.container_id, id);
    let find = |ms: &[pb::Metric], name: &str| -> pb::Metric {
        ms.iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone()
    };
    let ws = find(&c.metrics, "container_memory_working_set_bytes");
    let l = labels(&ws, &keys[&ws.name]);
    assert_eq!(l["container"], "app");
    assert_eq!(l["name"], id);
    assert_eq!(l["pod"], "measured");
    assert_eq!(l["namespace"], "crust-test");
    assert_eq!(l["image"], e.image);
    // cAdvisor's id is the cgroup as the kernel names it.
    assert!(
        l["id"].ends_with(&format!("/{id}")) && cgroup.ends_with(&l["id"][1..]),
        "{l:?}"
    );
    assert!(ws.value.as_ref().unwrap().value >= 8 << 20);
    assert!(ws.timestamp > 0);
    assert_eq!(ws.metric_type, pb::MetricType::Gauge as i32);
    let limit = find(&c.metrics, "container_spec_memory_limit_bytes");
    assert_eq!(limit.value.unwrap().value, 64 << 20);
    assert_eq!(
        find(&c.metrics, "container_spec_cpu_quota")
            .value
            .unwrap()
            .value,
        20_000
    );
    let cpu = find(&c.metrics, "container_cpu_usage_seconds_total");
    assert_eq!(cpu.metric_type, pb::MetricType::Counter as i32);
    assert_eq!(labels(&cpu, &keys[&cpu.name])["cpu"], "total");
    let fs = find(&c.metrics, "container_fs_usage_bytes");
    assert!(fs.value.unwrap().value > 0);
    assert!(!labels(&fs, &keys[&fs.name])["device"].is_empty());
    let started = find(&c.metrics, "container_start_time_seconds")
        .value
        .unwrap()
        .value;
    let status = e.status(&id).await;
    assert_eq!(started as i64, status.started_at / 1_000_000_000);
    assert!(find(&c.metrics, "container_processes").value.unwrap().value >= 1);
    // The pod's own cgroup: container "", and the pod's network.
    let rx = find(&p.metrics, "container_network_receive_bytes_total");
    let l = labels(&rx, &keys[&rx.name]);
    assert_eq!(
        (l["container"].as_str(), l["interface"].as_str()),
        ("", "eth0")
    );
    assert_eq!(l["pod"], "measured");
    let pod_ws = find(&p.metrics, "container_memory_working_set_bytes");
    assert!(pod_ws.value.unwrap().value >= 8 << 20);
    // Every series has as many label values as its descriptor has keys (what kubelet needs to
    // turn them into Prometheus metrics).
    for m in p.metrics.iter().chain(&c.metrics) {
        labels(
            m,
            keys.get(&m.name)
                .unwrap_or_else(|| panic!("{} has no descriptor", m.name)),
        );
    }
    // StreamPodSandboxMetrics answers the same pods.
    let mut stream =
        e.c.stream_pod_sandbox_metrics(pb::StreamPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner();
    let mut streamed = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        streamed.extend(
            batch
                .pod_sandbox_metrics
                .into_iter()
                .map(|p| p.pod_sandbox_id),
        );
    }
    assert!(streamed.contains(&pod.0));
}

/// A free TCP port on loopback (bound, then released for the daemon).
/// `GET /metrics`, parsed: (metric name, labels) -> value.
fn scrape(port: u16) -> (String, Vec<prometheus_parse::Sample>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    let parsed = prometheus_parse::Scrape::parse(lines).unwrap();
    (head.to_owned(), parsed.samples)
}

fn value(samples: &[prometheus_parse::Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| s.metric == name && want.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .filter_map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
        .collect();
    matching.iter().sum()
}

#[tokio::test]
async fn the_prometheus_endpoint_counts_rpcs_pods_containers_and_pulls() {
    let port = free_port();
    let mut e = Env::start_with(|d| {
        d.append_config(&format!("\n[metrics]\naddress = \"127.0.0.1:{port}\"\n"));
    })
    .await;
    let (_, before) = scrape(port);
    // The test image was pulled at start.
    assert!(value(&before, "crust_image_pulls_total", &[]) >= 1.0);
    assert!(value(&before, "crust_image_pull_bytes_total", &[]) > 0.0);
    let versions = value(
        &before,
        "crust_grpc_requests_total",
        &[("method", "Version"), ("code", "OK")],
    );
    for _ in 0..3 {
        e.c.version(pb::VersionRequest::default()).await.unwrap();
    }
    let missing =
        e.c.pod_sandbox_status(pb::PodSandboxStatusRequest {
            pod_sandbox_id: "nonexistent".into(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let failed_pull =
        e.d.images()
            .await
            .pull_image(pb::PullImageRequest {
                image: Some(pb::ImageSpec {
                    image: format!("{}/nonexistent:1", e.reg.addr),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap_err();
    let pod = e.pod("scraped").await;
    e.run(&pod, e.config("one", &["sleep", "3600"])).await;
    e.create(&pod, e.config("two", &["sleep", "3600"]))
        .await
        .unwrap();

    let (_, after) = scrape(port);
    let v = |name: &str, labels: &[(&str, &str)]| value(&after, name, labels);
    assert_eq!(
        v(
            "crust_grpc_requests_total",
            &[("method", "Version"), ("code", "OK")]
        ) - versions,
        3.0
    );
    assert_eq!(
        v(
            "crust_grpc_requests_total",
            &[("method", "PodSandboxStatus"), ("code", "NotFound")]
        ),
        1.0
    );
    // The histogram counted them too.
    let timed = after.iter().find(|s| {
        s.metric == "crust_grpc_request_duration_seconds"
            && s.labels.get("method") == Some("PodSandboxStatus")
    });
    let Some(prometheus_parse::Value::Histogram(buckets)) = timed.map(|s| &s.value) else {
        panic!("no PodSandboxStatus latency histogram: {timed:?}");
    };
    assert_eq!(buckets.last().unwrap().count, 1.0);
    let reason = failed_pull.code();
    let reason = crust::metrics::code_name(reason as i32);
    assert_eq!(
        v("crust_image_pull_failures_total", &[("reason", reason)]),
        1.0
    );
    assert_eq!(v("crust_pods", &[("state", "ready")]), 1.0);
    assert_eq!(v("crust_containers", &[("state", "running")]), 1.0);
    assert_eq!(v("crust_containers", &[("state", "created")]), 1.0);
    assert_eq!(v("crust_event_subscribers", &[]), 0.0);
    assert_eq!(v("crust_oom_kills_total", &[]), 0.0);

    // Anything but /metrics is 404.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 404"), "{raw}");
}

#[tokio::test]
async fn an_oom_kill_is_counted() {
    let port = free_port();
    let mut e = Env::start_with(|d| {
        d.append_config(&format!("\n[metrics]\naddress = \"127.0.0.1:{port}\"\n"));
    })
    .await;
    let pod = e.pod("oom").await;
    let id = e.run(&pod, e.memory_hog("hog")).await;
    let s = e.wait_exit(&id, Duration::from_secs(20)).await;
    assert_eq!(s.reason, "OOMKilled");
    let (_, samples) = scrape(port);
    assert_eq!(value(&samples, "crust_oom_kills_total", &[]), 1.0);
}

#[tokio::test]
async fn no_endpoint_unless_configured() {
    let e = Env::start().await;
    let log = e.d.log();
    assert!(!log.contains("serving metrics"), "{log}");
}
