//! RunPodSandbox: plan every resource, save the `Creating` record, then bring the pod up: monitor
//! (which makes and pins the namespaces), then CNI ADD and the pod cgroup side by side. Any
//! failure undoes what was done and names the step that failed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::model::{NetworkState, Phase, SandboxRecord, SandboxSpec};
use super::teardown::Timed;
use super::{
    Entry, PodSysctlDefaults, RunFailure, SandboxContext, SandboxError, Sandboxes, host::files,
    now_nanos, teardown, validate,
};
use crate::history::Fact;
use crate::model::{NamespaceMode, new_id};
use crate::monitor::{self, MonitorConfig, NamespacePins};
use crate::network::{Attachment, PortMapping};

type StepError = (&'static str, RunFailure);

impl Sandboxes {
    /// Creates and starts a pod sandbox; returns its id.
    pub async fn run(self: &Arc<Self>, spec: SandboxSpec) -> Result<String, SandboxError> {
        let me = self.clone();
        super::detached(async move { me.run_to_end(spec).await }).await
    }

    async fn run_to_end(self: &Arc<Self>, spec: SandboxSpec) -> Result<String, SandboxError> {
        validate::spec(&spec).map_err(SandboxError::Invalid)?;
        let handler = self.resolve_handler(&spec.runtime_handler)?;
        let id = new_id();
        // Later logs of this request (step timings, rollbacks) name the new sandbox.
        tracing::Span::current().record("pod_id", id.as_str());
        self.reserve(&spec.metadata, &id)?;
        let meta = spec.metadata.clone();
        let result = self.create(id.clone(), spec, handler).await;
        if result.is_err() {
            self.release(&meta, &id);
        }
        result.map(|()| id)
    }

    fn resolve_handler(&self, requested: &str) -> Result<String, SandboxError> {
        let ctx = &self.ctx;
        let handler = if requested.is_empty() {
            &ctx.default_handler
        } else {
            requested
        };
        if !ctx.handlers.iter().any(|h| h == handler) {
            return Err(SandboxError::UnknownHandler {
                handler: handler.to_owned(),
                known: ctx.handlers.clone(),
            });
        }
        Ok(handler.to_owned())
    }

    async fn create(
        self: &Arc<Self>,
        id: String,
        spec: SandboxSpec,
        handler: String,
    ) -> Result<(), SandboxError> {
        let mut record = plan(&self.ctx, id, spec, handler)?;
        let hostname = pod_hostname(&record.spec);
        if let Err((step, cause)) = prepare(&record, &hostname)
            .and_then(|()| save_planned(&self.ctx, &record).map_err(|e| ("save sandbox record", e)))
        {
            let _ = files::unmount_shm(&record.dir);
            let _ = crate::durable::remove_dir_all(&record.dir);
            let _ = crate::durable::remove_dir_all(self.ctx.record_dir(&record.id));
            self.ctx.note(&record, failed(&record, step, &cause));
            return Err(SandboxError::Run {
                step,
                cause: Box::new(cause),
                cleanup: None,
            });
        }
        crate::failpoint!("sandbox.run.after_creating_record");
        let mut told_plugins = false;
        let mut brought_up = bring_up(&self.ctx, &mut record, hostname).await;
        if brought_up.is_ok() {
            // Up but not yet visible: NRI plugins see the pod before any client does.
            told_plugins = true;
            let pod = super::plugins::pod_info(&record);
            brought_up = self
                .ctx
                .nri
                .run_pod(&pod)
                .await
                .map_err(|e| ("run the NRI plugins' RunPodSandbox", e.into()));
        }
        let saved = match brought_up {
            Ok(()) => {
                record.phase = Phase::Ready;
                crate::store::save(&self.ctx.record_path(&record.id), &record)
                    .map_err(|e| ("save sandbox record", e.into()))
            }
            Err(e) => Err(e),
        };
        if let Err((step, cause)) = saved {
            if told_plugins {
                self.ctx.nri.run_pod_failed(&record.id).await;
            }
            let cleanup = teardown::release(&self.ctx, &record).await.err();
            if cleanup.is_none() {
                let _ = crate::durable::remove_dir_all(&record.dir);
                let _ = crate::durable::remove_dir_all(self.ctx.record_dir(&record.id));
            }
            self.ctx.note(&record, failed(&record, step, &cause));
            return Err(SandboxError::Run {
                step,
                cause: Box::new(cause),
                cleanup,
            });
        }
        crate::failpoint!("sandbox.run.after_ready_record");
        let m = &record.spec.metadata;
        let ready = Fact::SandboxReady {
            uid: m.uid.clone(),
            attempt: m.attempt,
            ip: record.ips().first().map(ToString::to_string),
        };
        self.ctx.note(&record, ready);
        let entry = self.insert(record);
        self.watch(&entry);
        Ok(())
    }

    /// Marks the sandbox NotReady if its monitor dies while the sandbox is ready.
    pub(super) fn watch(self: &Arc<Self>, entry: &Arc<Entry>) {
        let record = entry.snapshot();
        let Some(identity) = record.monitor else {
            return;
        };
        let handle = monitor::MonitorHandle {
            identity,
            dir: record.dir.clone(),
        };
        let me = Arc::downgrade(self);
        let watched = Arc::downgrade(entry);
        let task = tokio::spawn(async move {
            let _ = handle.exited().await;
            let (Some(me), Some(entry)) = (me.upgrade(), watched.upgrade()) else {
                return;
            };
            // The same lock as Stop and Remove: the record changes under one writer at a time
            // (Stop aborts this task once it holds the lock).
            let _op = entry.op.clone().lock_owned().await;
            let rec = entry.snapshot();
            if rec.phase != Phase::Ready || rec.monitor != Some(identity) {
                return;
            }
            if !me.table().by_id.contains_key(&rec.id) {
                return;
            }
            let death = super::monitor_death(&me.ctx.cgroups, &rec);
            tracing::warn!(pod_id = %rec.id, pid = identity.pid, %death, "pod monitor died; sandbox is not ready");
            crate::metrics::monitor_died();
            let cause = death.to_string();
            me.ctx.note(
                &rec,
                Fact::MonitorDied {
                    pid: identity.pid,
                    cause: cause.clone(),
                },
            );
            let exited = me.commit(&entry, |r| {
                r.phase = Phase::Exited;
                r.problem = Some(format!("the pod monitor (pid {}) {cause}", identity.pid));
            });
            if let Err(e) = exited {
                tracing::error!(pod_id = %rec.id, error = %e, "saving sandbox record");
            }
        });
        *entry.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }
}

/// Saves the `Creating` record on disk, before anything is made for the pod, with its planned
/// copy beside it: what a reboot or a damaged record leaves recovery to release.
fn save_planned(ctx: &SandboxContext, record: &SandboxRecord) -> Result<(), RunFailure> {
    let dir = ctx.record_dir(&record.id);
    crate::durable::create_dir_all(&dir).map_err(RunFailure::io(&dir))?;
    crate::store::save_with_copy(
        &ctx.record_path(&record.id),
        &ctx.planned_path(&record.id),
        record,
    )?;
    Ok(())
}

/// The history's account of a RunPodSandbox that failed at `step`.
fn failed(record: &SandboxRecord, step: &str, cause: &RunFailure) -> Fact {
    Fact::SandboxFailed {
        uid: record.spec.metadata.uid.clone(),
        attempt: record.spec.metadata.attempt,
        step: step.to_owned(),
        error: cause.to_string(),
    }
}

/// Decides every path and name the sandbox will use, before anything is created.
fn plan(
    ctx: &SandboxContext,
    id: String,
    spec: SandboxSpec,
    handler: String,
) -> Result<SandboxRecord, SandboxError> {
    let ns = spec.namespaces;
    let pin = |kind: &str, wanted: bool| wanted.then(|| ctx.ns_dir().join(format!("{id}.{kind}")));
    let pins = NamespacePins {
        net: pin("net", !ns.host_network()),
        ipc: pin("ipc", ns.ipc != NamespaceMode::Node),
        uts: pin("uts", !ns.host_network()),
        pid: pin("pid", ns.pid == NamespaceMode::Pod),
        user: pin("user", spec.id_maps().is_some()),
    };
    let network = match &pins.net {
        None => None,
        Some(netns) => {
            let list = ctx
                .cni
                .network()
                .map_err(|e| SandboxError::NetworkNotReady(e.to_string()))?;
            let attachment = attachment(&id, &spec, netns.clone());
            Some(NetworkState {
                list,
                attachment,
                result: None,
            })
        }
    };
    Ok(SandboxRecord {
        cgroup: ctx.cgroups.pod_path(&spec.cgroup_parent, &id),
        monitor_cgroup: Some(ctx.cgroups.monitor_path(&id)),
        dir: ctx.sandbox_dir(&id),
        created_at: now_nanos(),
        phase: Phase::Creating,
        runtime: ctx.runtimes.get(&handler).cloned(),
        runtime_handler: handler,
        monitor: None,
        pins,
        network,
        spec,
        id,
        problem: None,
    })
}

fn attachment(id: &str, spec: &SandboxSpec, netns: std::path::PathBuf) -> Attachment {
    let m = &spec.metadata;
    Attachment {
        container_id: id.to_owned(),
        netns,
        ifname: "eth0".into(),
        args: vec![
            ("K8S_POD_NAMESPACE".into(), m.namespace.clone()),
            ("K8S_POD_NAME".into(), m.name.clone()),
            ("K8S_POD_INFRA_CONTAINER_ID".into(), id.to_owned()),
            ("K8S_POD_UID".into(), m.uid.clone()),
        ],
        // A mapping without a host port only documents the container port; nothing to forward.
        port_mappings: spec
            .port_mappings
            .iter()
            .filter(|p| p.host_port > 0)
            .map(|p| PortMapping {
                host_port: p.host_port,
                container_port: p.container_port,
                protocol: p.protocol.as_str().into(),
                host_ip: p.host_ip.clone(),
            })
            .collect(),
    }
}

/// The pod's hostname: the requested one, else the node's (as containerd does).
fn pod_hostname(spec: &SandboxSpec) -> String {
    if !spec.hostname.is_empty() && !spec.namespaces.host_network() {
        return spec.hostname.clone();
    }
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

fn prepare(record: &SandboxRecord, hostname: &str) -> Result<(), StepError> {
    let step = "prepare sandbox directory";
    let dir = &record.dir;
    crate::durable::create_dir_all(dir).map_err(|e| (step, RunFailure::io(dir)(e)))?;
    // Container logs go here; kubelet owns the directory afterwards (it is never removed here).
    let logs = std::path::Path::new(&record.spec.log_directory);
    if !record.spec.log_directory.is_empty() {
        crate::durable::create_dir_all(logs)
            .map_err(|e| ("create the log directory", RunFailure::io(logs)(e)))?;
    }
    files::write(dir, &record.spec, hostname).map_err(|e| (step, RunFailure::io(dir)(e)))?;
    if record.pins.ipc.is_some() {
        files::mount_shm(dir).map_err(|e| ("mount the pod's /dev/shm", RunFailure::io(dir)(e)))?;
    }
    if let Some(maps) = record.spec.id_maps() {
        let (uid, gid) = maps.root();
        files::give_to_pod_root(dir, uid, gid)
            .map_err(|e| ("give the pod's files to its root", RunFailure::io(dir)(e)))?;
    }
    Ok(())
}

/// The sysctls the pod's monitor sets: the request's, and for a pod with a network namespace
/// of its own the defaults it does not set itself (containerd 2.x's unprivileged ports and
/// ICMP). The record keeps the request's alone: the defaults follow the configuration.
fn pod_sysctls(spec: &SandboxSpec, defaults: PodSysctlDefaults) -> BTreeMap<String, String> {
    let mut sysctls = spec.sysctls.clone();
    if !spec.namespaces.host_network() {
        let wanted = [
            (defaults.unprivileged_ports, UNPRIVILEGED_PORTS),
            (defaults.unprivileged_icmp, UNPRIVILEGED_ICMP),
        ];
        for (key, value) in wanted.into_iter().filter_map(|(on, kv)| on.then_some(kv)) {
            sysctls.entry(key.into()).or_insert_with(|| value.into());
        }
        // In a user namespace the kernel takes only groups the namespace maps.
        if let (Some(maps), true) = (spec.id_maps(), defaults.unprivileged_icmp) {
            let range = format!("0 {}", maps.gid.size - 1);
            sysctls.entry(UNPRIVILEGED_ICMP.0.into()).and_modify(|v| {
                if v == UNPRIVILEGED_ICMP.1 {
                    v.clone_from(&range)
                }
            });
        }
    }
    sysctls
}

const UNPRIVILEGED_PORTS: (&str, &str) = ("net.ipv4.ip_unprivileged_port_start", "0");
const UNPRIVILEGED_ICMP: (&str, &str) = ("net.ipv4.ping_group_range", "0 2147483647");

async fn bring_up(
    ctx: &SandboxContext,
    record: &mut SandboxRecord,
    hostname: String,
) -> Result<(), StepError> {
    let config = MonitorConfig {
        sandbox_id: record.id.clone(),
        dir: record.dir.clone(),
        pins: record.pins.clone(),
        hostname: record.pins.uts.is_some().then_some(hostname),
        sysctls: pod_sysctls(&record.spec, ctx.pod_sysctls)
            .iter()
            .map(|(k, v)| (validate::sysctl_path(k), v.clone()))
            .collect(),
        id_maps: record.spec.id_maps(),
        cgroup_v1_mounts: ctx.cgroups.v1_mounts(),
    };
    let started = Timed::start("monitor ready");
    let handle = monitor::spawn(&ctx.exe, &config, ctx.monitor_timeout)
        .await
        .map_err(|e| ("start the pod monitor", e.into()))?;
    drop(started);
    crate::failpoint!("sandbox.run.after_monitor");
    record.monitor = Some(handle.identity);
    let network = async {
        let _t = Timed::start("CNI ADD done");
        match &record.network {
            Some(net) => {
                let added = ctx.cni.add(&net.list, &net.attachment).await;
                if added.is_ok() {
                    crate::failpoint!("sandbox.run.after_cni_add");
                }
                added.map(Some)
            }
            None => Ok(None),
        }
    };
    let mut pids = vec![handle.identity.pid];
    pids.extend(handle.identity.init_pid);
    let cgroups = ctx.cgroups.clone();
    let path = record.cgroup.clone();
    let monitor_path = record.monitor_cgroup().to_owned();
    let span = tracing::Span::current();
    let cgroup = tokio::task::spawn_blocking(move || {
        let _in = span.enter();
        let _t = Timed::start("pod cgroup created");
        let created = cgroups.create_pod(&path, &monitor_path, &pids);
        if created.is_ok() {
            crate::failpoint!("sandbox.run.after_cgroup");
        }
        created
    });
    let (net, cg) = tokio::join!(network, cgroup);
    let net = net.map_err(|e| ("set up the pod network", e.into()))?;
    cg.map_err(|e| ("create the pod cgroup", RunFailure::Task(e.to_string())))?
        .map_err(|e| ("create the pod cgroup", e.into()))?;
    if let (Some(state), Some(result)) = (record.network.as_mut(), net) {
        state.result = Some(result);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_with_their_own_network_get_the_defaults_they_do_not_set() {
        let on = PodSysctlDefaults {
            unprivileged_ports: true,
            unprivileged_icmp: true,
        };
        let mut spec = SandboxSpec::default();
        let got = pod_sysctls(&spec, on);
        assert_eq!(got["net.ipv4.ip_unprivileged_port_start"], "0");
        assert_eq!(got["net.ipv4.ping_group_range"], "0 2147483647");

        spec.sysctls
            .insert("net.ipv4.ip_unprivileged_port_start".into(), "80".into());
        let got = pod_sysctls(&spec, on);
        assert_eq!(got["net.ipv4.ip_unprivileged_port_start"], "80");
        assert_eq!(got.len(), 2);

        let ports_only = PodSysctlDefaults {
            unprivileged_icmp: false,
            ..on
        };
        spec.sysctls.clear();
        assert_eq!(
            pod_sysctls(&spec, ports_only).keys().collect::<Vec<_>>(),
            ["net.ipv4.ip_unprivileged_port_start"]
        );

        spec.namespaces.network = NamespaceMode::Node;
        assert!(
            pod_sysctls(&spec, on).is_empty(),
            "the node's are never set"
        );
    }
}
