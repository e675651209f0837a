//! crust's own metrics, for an operator watching the runtime itself (the workloads' series are
//! CRI's ListPodSandboxMetrics, `crate::stats::cadvisor`): RPCs by method and code with their
//! latency, pods and containers by state, image pulls, OOM kills, monitor deaths, event
//! subscribers and those cut off. Served in the Prometheus (OpenMetrics) text format by
//! `http.rs` when `metrics.address` is set; off by default.
//!
//! The families are process-wide, so any module records into them through the functions
//! here without carrying a handle; they cost an atomic add whether or not anything scrapes.
//! Pods and containers by state and the event hub's subscribers are counted at scrape time from
//! the daemon's tables, through the closures in [`StateSource`], so this module depends on
//! nothing else in crust.
//!
//! Built on `prometheus-client`, the Prometheus project's Rust client: typed label sets, no
//! global default registry, and its text encoder, so crust never writes the exposition format
//! by hand.

mod http;

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use http::serve;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Latency buckets for RPCs, in seconds: 100 µs (a status read) to 2 min (a pull, a stop with
/// a long grace period).
const RPC_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
    30.0, 120.0,
];
const PULL_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0];

fn rpc_histogram() -> Histogram {
    Histogram::new(RPC_BUCKETS)
}

struct Metrics {
    rpcs: Family<RpcLabels, Counter>,
    rpc_seconds: Family<RpcLabels, Histogram, fn() -> Histogram>,
    pulls: Counter,
    pull_failures: Family<ReasonLabels, Counter>,
    pull_seconds: Histogram,
    pull_bytes: Counter,
    oom_kills: Counter,
    monitor_deaths: Counter,
    monitors_adopted: Counter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    rpcs: Family::default(),
    rpc_seconds: Family::new_with_constructor(rpc_histogram),
    pulls: Counter::default(),
    pull_failures: Family::default(),
    pull_seconds: Histogram::new(PULL_BUCKETS),
    pull_bytes: Counter::default(),
    oom_kills: Counter::default(),
    monitor_deaths: Counter::default(),
    monitors_adopted: Counter::default(),
});

/// One RPC answered: `method` as the request path names it, `code` the gRPC status code.
pub fn rpc_finished(method: &str, code: i32, took: Duration) {
    let labels = RpcLabels {
        method: method.to_owned(),
        code: code_name(code),
    };
    METRICS.rpcs.get_or_create(&labels).inc();
    METRICS
        .rpc_seconds
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// One image pull ended, successfully (`failure` None) or not (its gRPC code, as the reason).
pub fn image_pull_finished(took: Duration, failure: Option<i32>) {
    METRICS.pulls.inc();
    METRICS.pull_seconds.observe(took.as_secs_f64());
    if let Some(code) = failure {
        let reason = code_name(code);
        METRICS
            .pull_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// Bytes received from a registry while pulling.
pub fn image_bytes_downloaded(n: u64) {
    METRICS.pull_bytes.inc_by(n);
}

/// A container was killed by the kernel's OOM killer.
pub fn oom_kill() {
    METRICS.oom_kills.inc();
}

/// A pod's monitor died on its own (its containers died with it).
pub fn monitor_died() {
    METRICS.monitor_deaths.inc();
}

/// Running pods whose monitor a restarted daemon found and reconnected to.
pub fn monitors_adopted(n: u64) {
    METRICS.monitors_adopted.inc_by(n);
}

/// (state, count) pairs, taken at scrape time.
pub type Counts = Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// What is counted at scrape time.
pub struct StateSource {
    /// The pod sandboxes by state.
    pub pods: Counts,
    /// The containers by state.
    pub containers: Counts,
    /// GetContainerEvents subscribers now, and those cut off or gone since start.
    pub events: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
}

impl fmt::Debug for StateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StateSource")
    }
}

impl Collector for StateSource {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        for (name, help, counts) in [
            ("pods", "Pod sandboxes by state.", (self.pods)()),
            ("containers", "Containers by state.", (self.containers)()),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (state, n) in counts {
                let labels = [("state", state)];
                ConstGauge::new(n as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        let (subscribers, dropped) = (self.events)();
        let help = "GetContainerEvents subscribers connected";
        let family =
            encoder.encode_descriptor("event_subscribers", help, None, MetricType::Gauge)?;
        ConstGauge::new(subscribers as i64).encode(family)?;
        let help = "GetContainerEvents subscribers cut off for falling behind, or gone";
        let kind = MetricType::Counter;
        let family = encoder.encode_descriptor("event_subscribers_dropped", help, None, kind)?;
        ConstCounter::new(dropped).encode(family)?;
        Ok(())
    }
}

/// A registry with every family, under the `crust_` prefix.
pub fn registry(state: StateSource) -> Registry {
    let m = &*METRICS;
    let mut r = Registry::with_prefix("crust");
    r.register(
        "grpc_requests",
        "CRI RPCs answered, by method and gRPC code",
        m.rpcs.clone(),
    );
    r.register(
        "grpc_request_duration_seconds",
        "Time to answer a CRI RPC (to the end of a streamed answer), by method and code",
        m.rpc_seconds.clone(),
    );
    r.register("image_pulls", "Image pulls finished", m.pulls.clone());
    r.register(
        "image_pull_failures",
        "Image pulls that failed, by reason (the gRPC code answered)",
        m.pull_failures.clone(),
    );
    r.register(
        "image_pull_duration_seconds",
        "Time an image pull took, whether or not its client waited",
        m.pull_seconds.clone(),
    );
    r.register(
        "image_pull_bytes",
        "Bytes received from registries while pulling images",
        m.pull_bytes.clone(),
    );
    r.register(
        "oom_kills",
        "Containers the kernel's OOM killer ended",
        m.oom_kills.clone(),
    );
    r.register(
        "monitor_deaths",
        "Pod monitors that died on their own, taking their pod's containers with them",
        m.monitor_deaths.clone(),
    );
    r.register(
        "monitors_adopted",
        "Pod monitors a restarted daemon reconnected to",
        m.monitors_adopted.clone(),
    );
    r.register_collector(Box::new(state));
    r
}

/// The registry's families in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

/// gRPC's name for a status code, as other gRPC servers' metrics label them.
pub fn code_name(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("Unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_state_counts_in_the_text_format() {
        rpc_finished("Version", 0, Duration::from_micros(300));
        rpc_finished("PodSandboxStatus", 5, Duration::from_millis(2));
        image_pull_finished(Duration::from_secs(1), Some(16));
        oom_kill();
        let r = registry(StateSource {
            pods: Box::new(|| vec![("ready", 2), ("notready", 1)]),
            containers: Box::new(|| vec![("running", 3)]),
            events: Box::new(|| (2, 1)),
        });
        let text = encode(&r);
        for line in [
            "# TYPE crust_grpc_requests counter",
            "crust_grpc_requests_total{method=\"PodSandboxStatus\",code=\"NotFound\"} 1",
            "crust_grpc_request_duration_seconds_bucket{le=\"0.0005\",method=\"Version\",code=\"OK\"} 1",
            "crust_image_pull_failures_total{reason=\"Unauthenticated\"} 1",
            "crust_pods{state=\"notready\"} 1",
            "crust_containers{state=\"running\"} 3",
            "crust_event_subscribers 2",
            "crust_event_subscribers_dropped_total 1",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(text.contains("crust_oom_kills_total "), "{text}");
    }

    #[test]
    fn code_names() {
        assert_eq!(code_name(0), "OK");
        assert_eq!(code_name(4), "DeadlineExceeded");
        assert_eq!(code_name(16), "Unauthenticated");
        assert_eq!(code_name(99), "Unknown");
    }
}
