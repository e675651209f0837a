//! ContainerStats and ListContainerStats, the containers' part of PodSandboxStats, and
//! ListPodSandboxMetrics: each created or running container's cgroup (read by `crate::stats`,
//! v1 or v2), its CPU rate from the previous reading, and its writable layer's usage; for the
//! metrics, also its processes' open files and its pod's network.
//!
//! Everything here reads files: callers run it off the async threads. Only created and running
//! containers have statistics, as with containerd: an exited one has no processes left.
//!
//! A writable layer is measured by walking it, which costs in proportion to the files the
//! container wrote. Its usage is kept for a while after each walk, for a hundred times as long
//! as the walk took (between 1 s and 60 s), so statistics stay cheap for a container that writes
//! many files and fresh for the rest.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::container::{
    ContainerError, ContainerFilter, ContainerRecord, Containers, Phase, now_nanos,
};
use crate::sandbox::{PodStats, SandboxFilter};
use crate::stats::cadvisor::{self, Metric, Observed, Subject};
use crate::stats::{CgroupSample, CpuRates, Detail, Filesystem};

/// One container's statistics.
pub struct ContainerStats {
    pub record: Arc<ContainerRecord>,
    pub cgroup: CgroupSample,
    /// None when the layer could not be measured (removed meanwhile).
    pub writable_layer: Option<LayerUsage>,
}

/// What a container's writable layer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerUsage {
    /// When it was measured, nanoseconds since the epoch.
    pub timestamp: i64,
    /// The directory ImageFsInfo reports the container filesystem under (kubelet matches them).
    pub mountpoint: PathBuf,
    pub bytes: u64,
    pub inodes: u64,
}

/// A pod's statistics with its containers'.
pub struct PodUsage {
    pub pod: PodStats,
    pub containers: Vec<ContainerStats>,
}

/// One pod's metrics: its own cgroup's series and each container's.
pub struct PodMetrics {
    pub pod_id: String,
    pub metrics: Vec<Metric>,
    /// By container id.
    pub containers: Vec<(String, Vec<Metric>)>,
}

/// What statistics remember between calls.
#[derive(Default)]
pub struct StatsState {
    cpu_rates: CpuRates,
    layers: Mutex<HashMap<String, (Instant, Duration, LayerUsage)>>,
    /// The layers directory's filesystem device, found once.
    device: Mutex<Option<String>>,
}

/// Containers one thread measures before a listing is split across threads, and the most
/// threads it is split across.
const PER_THREAD: usize = 25;
const MAX_THREADS: usize = 4;

/// How long a walk's result is kept, per unit of time the walk took.
const LAYER_REUSE_FACTOR: u32 = 100;
const LAYER_REUSE_MIN: Duration = Duration::from_secs(1);
const LAYER_REUSE_MAX: Duration = Duration::from_secs(60);

impl Containers {
    /// Statistics of container `id` (full id or unique prefix).
    pub fn stats(&self, id: &str) -> Result<ContainerStats, ContainerError> {
        let record = self.status(id)?;
        if !has_stats(&record) {
            return Err(ContainerError::State {
                id: record.id.clone(),
                state: record.state_name(),
                what: "read its statistics (it has no processes)",
            });
        }
        self.measure(record, Detail::Stats)
    }

    /// Statistics of the created and running containers `filter` selects (its state is
    /// ignored); a container that exits while being measured is left out.
    pub fn list_stats(&self, filter: &ContainerFilter) -> Vec<ContainerStats> {
        let records = self.list(&ContainerFilter {
            state: None,
            ..filter.clone()
        });
        if filter.id.is_none() && filter.pod_id.is_none() && filter.labels.is_empty() {
            self.forget_removed(&records);
        }
        let records: Vec<_> = records.into_iter().filter(|r| has_stats(r)).collect();
        self.measure_all(&records, Detail::Stats)
    }

    /// Measures `records`, split across a few threads when there are many: the reads are
    /// system calls, and a node has cores for kubelet's housekeeping. One that exits meanwhile
    /// is left out.
    fn measure_all(&self, records: &[Arc<ContainerRecord>], detail: Detail) -> Vec<ContainerStats> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS)
            .min(records.len().div_ceil(PER_THREAD));
        let measure = |chunk: &[Arc<ContainerRecord>]| -> Vec<ContainerStats> {
            chunk
                .iter()
                .filter_map(|r| self.measure(r.clone(), detail).ok())
                .collect()
        };
        if threads <= 1 {
            return measure(records);
        }
        std::thread::scope(|scope| {
            let parts: Vec<_> = records
                .chunks(records.len().div_ceil(threads))
                .map(|chunk| scope.spawn(move || measure(chunk)))
                .collect();
            // A panicking reader is a bug; its containers are left out rather than the daemon.
            parts
                .into_iter()
                .flat_map(|p| p.join().unwrap_or_default())
                .collect()
        })
    }

    /// PodSandboxStats: the pod's statistics and its containers'.
    pub fn pod_stats(&self, pod_id: &str) -> Result<PodUsage, ContainerError> {
        let pod = self.sandboxes().stats(pod_id)?;
        let containers = self.list_stats(&ContainerFilter {
            pod_id: Some(pod.record.id.clone()),
            ..Default::default()
        });
        Ok(PodUsage { pod, containers })
    }

    /// ListPodSandboxStats: the ready pods `filter` selects, each with its containers.
    pub fn list_pod_stats(&self, filter: &SandboxFilter) -> Vec<PodUsage> {
        let pods = self.sandboxes().list_stats(filter, Detail::Stats);
        let mut by_pod: HashMap<String, Vec<ContainerStats>> = HashMap::new();
        let all = match (&filter.id, pods.len()) {
            (_, 0) => Vec::new(),
            (Some(_), 1) => self.list_stats(&ContainerFilter {
                pod_id: Some(pods[0].record.id.clone()),
                ..Default::default()
            }),
            _ => self.list_stats(&ContainerFilter::default()),
        };
        for c in all {
            by_pod.entry(c.record.pod_id.clone()).or_default().push(c);
        }
        pods.into_iter()
            .map(|pod| PodUsage {
                containers: by_pod.remove(&pod.record.id).unwrap_or_default(),
                pod,
            })
            .collect()
    }

    /// ListPodSandboxMetrics: the cAdvisor-named series of every ready pod and its created and
    /// running containers.
    pub fn pod_metrics(&self) -> Vec<PodMetrics> {
        let pods = self
            .sandboxes()
            .list_stats(&SandboxFilter::default(), Detail::Metrics);
        let mut containers: HashMap<String, Vec<Arc<ContainerRecord>>> = HashMap::new();
        for r in self.list(&ContainerFilter::default()) {
            if has_stats(&r) {
                containers.entry(r.pod_id.clone()).or_default().push(r);
            }
        }
        let fs = self.layers_filesystem();
        let now = now_nanos();
        let device_name = |major, minor| crate::stats::block_device_name(major, minor);
        pods.into_iter()
            .map(|pod| {
                let meta = &pod.record.spec.metadata;
                let subject = Subject {
                    id: self.cgroup_id(&pod.record.cgroup),
                    namespace: meta.namespace.clone(),
                    pod: meta.name.clone(),
                    ..Default::default()
                };
                let observed = Observed {
                    sample: &pod.cgroup,
                    open_files: open_files(&pod.cgroup),
                    open_files_limit: None,
                    started_at: pod.record.created_at,
                    interfaces: pod.interfaces.as_deref().unwrap_or_default(),
                    layer: None,
                    device_name: &device_name,
                };
                let metrics = cadvisor::series(&subject, &observed, now);
                let ctrs = containers
                    .remove(&pod.record.id)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|r| {
                        let s = self.measure(r, Detail::Metrics).ok()?;
                        let subject = Subject {
                            container: s.record.spec.metadata.name.clone(),
                            id: self.cgroup_id(&s.record.cgroup),
                            image: s.record.image.name.clone(),
                            name: s.record.id.clone(),
                            ..subject.clone()
                        };
                        let layer = match (&s.writable_layer, &fs) {
                            (Some(l), Some(fs)) => Some((l.bytes, l.inodes, fs)),
                            _ => None,
                        };
                        let observed = Observed {
                            sample: &s.cgroup,
                            open_files: open_files(&s.cgroup),
                            open_files_limit: s.record.pid.and_then(crate::stats::open_files_limit),
                            started_at: s.record.started_at.max(s.record.created_at),
                            interfaces: &[],
                            layer,
                            device_name: &device_name,
                        };
                        Some((
                            s.record.id.clone(),
                            cadvisor::series(&subject, &observed, now),
                        ))
                    })
                    .collect();
                PodMetrics {
                    pod_id: pod.record.id.clone(),
                    metrics,
                    containers: ctrs,
                }
            })
            .collect()
    }

    fn measure(
        &self,
        record: Arc<ContainerRecord>,
        detail: Detail,
    ) -> Result<ContainerStats, ContainerError> {
        let dirs = self.ctx.cgroups.stat_dirs(&record.cgroup);
        let mut cgroup =
            crate::stats::read_cgroup(&dirs, detail, now_nanos()).map_err(|source| {
                ContainerError::Io {
                    what: "reading the statistics of cgroup",
                    path: PathBuf::from(&record.cgroup),
                    source,
                }
            })?;
        self.stats.cpu_rates.rate(&record.id, &mut cgroup);
        let writable_layer = self.layer_usage(&record.id);
        Ok(ContainerStats {
            record,
            cgroup,
            writable_layer,
        })
    }

    /// The writable layer's usage, measured again once the last measure is old enough.
    fn layer_usage(&self, id: &str) -> Option<LayerUsage> {
        if let Some((at, keep, usage)) = lock(&self.stats.layers).get(id) {
            if at.elapsed() < *keep {
                return Some(usage.clone());
            }
        }
        let upper = crate::container::rootfs::layout(&self.ctx, id).upper;
        let started = Instant::now();
        let (bytes, inodes) = crate::stats::disk_usage(&upper).ok()?;
        let took = started.elapsed();
        let keep = (took * LAYER_REUSE_FACTOR).clamp(LAYER_REUSE_MIN, LAYER_REUSE_MAX);
        let usage = LayerUsage {
            timestamp: now_nanos(),
            mountpoint: crate::stats::filesystem_id(&self.ctx.layers_dir, &self.ctx.image_root),
            bytes,
            inodes,
        };
        lock(&self.stats.layers).insert(id.to_owned(), (Instant::now(), keep, usage.clone()));
        Some(usage)
    }

    /// Forgets what is remembered of containers no longer in `listed` (all containers).
    fn forget_removed(&self, listed: &[Arc<ContainerRecord>]) {
        let live: HashSet<&str> = listed.iter().map(|r| r.id.as_str()).collect();
        self.stats.cpu_rates.retain(|id| live.contains(id));
        lock(&self.stats.layers).retain(|id, _| live.contains(id.as_str()));
    }

    /// Size and free space of the filesystem holding the writable layers (its device found
    /// once: it does not change while crust runs).
    fn layers_filesystem(&self) -> Option<Filesystem> {
        let mut device = lock(&self.stats.device);
        if let Some(d) = &*device {
            let mut fs = crate::stats::filesystem_usage(&self.ctx.layers_dir).ok()?;
            fs.device = d.clone();
            return Some(fs);
        }
        let fs = crate::stats::filesystem(&self.ctx.layers_dir).ok()?;
        *device = Some(fs.device.clone());
        Some(fs)
    }

    /// cAdvisor's `id` label: the cgroup as the kernel names it.
    fn cgroup_id(&self, cgroup: &str) -> String {
        self.ctx
            .cgroups
            .relative_dir(cgroup)
            .to_string_lossy()
            .into_owned()
    }
}

fn has_stats(r: &ContainerRecord) -> bool {
    matches!(r.phase, Phase::Created | Phase::Running)
}

fn open_files(s: &CgroupSample) -> crate::stats::OpenFiles {
    s.extra
        .as_ref()
        .map(|x| crate::stats::open_files(&x.procs))
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
