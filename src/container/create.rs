//! CreateContainer: plan, save the `Creating` record, then build the container: hold the
//! image, mount the root filesystem, build and write the OCI spec, and have the pod's monitor
//! create the process (which waits to be started). Any failure undoes what was done and
//! names the step that failed. An image that is the path of a checkpoint archive restores
//! the container from it (`checkpoint/restore.rs`).

use std::path::PathBuf;
use std::sync::Arc;

use super::checkpoint::{CheckpointError, restore};
use super::prepare::{self, Inputs};
use super::{
    ContainerError, ContainerRecord, Containers, ImageInfo, Phase, blocking, declared, detached,
    monitor_of, now_nanos, rootfs, teardown,
};
use crate::cdi::Resolved;
use crate::history::Fact;
use crate::model::NamespaceMode;
use crate::model::{ContainerSpec, ResolvedUser};
use crate::monitor::{CreateRequest, RestoreRequest};
use crate::sandbox::SandboxRecord;

type Step = (&'static str, ContainerError);

/// The history's account of a container just created.
fn created(record: &ContainerRecord) -> Fact {
    Fact::ContainerCreated {
        container: record.id.clone(),
        name: record.spec.metadata.name.clone(),
        attempt: record.spec.metadata.attempt,
        image: record.image.name.clone(),
        memory_limit: record.spec.resources.memory_limit,
    }
}

impl Containers {
    /// Creates a container in pod `pod_id`; returns its id.
    pub async fn create(
        self: &Arc<Self>,
        pod_id: &str,
        spec: ContainerSpec,
    ) -> Result<String, ContainerError> {
        let (me, pod_id) = (self.clone(), pod_id.to_owned());
        detached(async move { me.create_to_end(&pod_id, spec).await }).await
    }

    async fn create_to_end(
        self: &Arc<Self>,
        pod_id: &str,
        spec: ContainerSpec,
    ) -> Result<String, ContainerError> {
        validate(&spec)?;
        let pod = self.sandboxes.get(pod_id)?;
        if !pod.phase.is_ready() {
            return Err(ContainerError::PodNotReady(pod.id.clone()));
        }
        super::idmap::check(&spec, &pod)?;
        // Before anything is made: a device that cannot be given refuses the request whole.
        let cdi = self.resolve_cdi(&spec).await?;
        let id = crate::model::new_id();
        tracing::Span::current().record("container_id", id.as_str());
        self.reserve(&pod.id, &spec.metadata, &id)?;
        let meta = spec.metadata.clone();
        let result = self.create_reserved(&pod, id.clone(), spec, cdi).await;
        if let Err(e) = &result {
            self.release_name(&pod.id, &meta, &id);
            let fact = Fact::ContainerCreateFailed {
                name: meta.name.clone(),
                attempt: meta.attempt,
                error: e.to_string(),
            };
            self.sandboxes.context().note(&pod, fact);
        }
        result.map(|()| id)
    }

    /// The CDI devices the request names, resolved against the spec directories as they are
    /// now (a driver may have written a spec a moment ago).
    async fn resolve_cdi(&self, spec: &ContainerSpec) -> Result<Resolved, ContainerError> {
        let names = crate::cdi::requested(&spec.cdi_devices, &spec.annotations)?;
        if names.is_empty() {
            return Ok(Resolved::default());
        }
        let dirs = self.ctx.cdi_spec_dirs.clone();
        blocking(move || crate::cdi::Registry::load(&dirs).resolve(&names)).await
    }

    async fn create_reserved(
        self: &Arc<Self>,
        pod: &SandboxRecord,
        id: String,
        spec: ContainerSpec,
        cdi: Resolved,
    ) -> Result<(), ContainerError> {
        let mut record = plan(self, pod, id, spec);
        record.cdi_devices = cdi.injected();
        let (dir, record_dir) = (
            self.ctx.container_dir(&record.id),
            self.ctx.record_dir(&record.id),
        );
        let saved = [&record_dir, &dir]
            .into_iter()
            .try_for_each(|d| {
                crate::durable::create_dir_all(d).map_err(|source| ContainerError::Io {
                    what: "creating",
                    path: d.clone(),
                    source,
                })
            })
            .and_then(|()| {
                Ok(crate::store::save_with_copy(
                    &self.ctx.record_path(&record.id),
                    &self.ctx.planned_path(&record.id),
                    &record,
                )?)
            });
        if let Err(e) = saved {
            let _ = rootfs::remove_dir(&dir);
            let _ = rootfs::remove_dir(&record_dir);
            return Err(ContainerError::Create {
                step: "save the container record",
                source: Box::new(e),
                cleanup: None,
            });
        }
        crate::failpoint!("container.create.after_creating_record");
        let built = self.build(pod, &mut record, &cdi).await.and_then(|()| {
            record.phase = Phase::Created;
            crate::store::save(&self.ctx.record_path(&record.id), &record)
                .map_err(|e| ("save the container record", e.into()))
        });
        if let Err((step, source)) = built {
            // Plugins that heard of it hear it stop and go (nothing, if none did).
            self.sandboxes.context().nri.create_failed(&record.id).await;
            let cleanup = teardown::release(self, &record).await.err();
            return Err(ContainerError::Create {
                step,
                source: Box::new(source),
                cleanup,
            });
        }
        crate::failpoint!("container.create.after_created_record");
        tracing::info!(pid = record.pid, "container created");
        let (pod_id, id) = (record.pod_id.clone(), record.id.clone());
        self.sandboxes.context().note(pod, created(&record));
        let status = super::plugins::status(&record);
        self.insert(record);
        self.sandboxes.context().nri.post_create(&id, &status).await;
        self.watch_pod(&pod_id);
        self.publish(&id, super::EventKind::Created, &pod_id);
        Ok(())
    }

    /// The CDI devices NRI plugins asked for, resolved in the node's CDI registry and injected
    /// into `spec` after every plugin's adjustment (containerd's order), but those the request
    /// itself already injected. A device the registry cannot give fails CreateContainer with
    /// an error naming the plugins that asked, and the device.
    async fn inject_plugins_cdi(
        &self,
        record: &mut ContainerRecord,
        spec: &mut oci_spec::runtime::Spec,
        asked: &[(String, String)],
        already: &Resolved,
    ) -> Result<(), ContainerError> {
        let mut names: Vec<String> = Vec::new();
        for (name, _) in asked {
            if !already.devices.iter().any(|d| &d.name == name) && !names.contains(name) {
                names.push(name.clone());
            }
        }
        let mut plugins: Vec<&str> = asked.iter().map(|(_, p)| p.as_str()).collect();
        plugins.dedup();
        let failed = |e: crate::cdi::CdiError| {
            ContainerError::Nri(crate::nri::NriError::Adjustment {
                plugin: plugins.join(", "),
                message: format!("its CDI devices: {e}"),
            })
        };
        let dirs = self.ctx.cdi_spec_dirs.clone();
        let resolved = blocking(move || crate::cdi::Registry::load(&dirs).resolve(&names)).await;
        let resolved = match resolved {
            Ok(r) => r,
            Err(ContainerError::Cdi(e)) => return Err(failed(e)),
            Err(e) => return Err(e),
        };
        crate::cdi::apply(&resolved, spec).map_err(failed)?;
        record.cdi_devices.extend(resolved.injected());
        Ok(())
    }

    async fn build(
        &self,
        pod: &SandboxRecord,
        record: &mut ContainerRecord,
        cdi: &Resolved,
    ) -> Result<(), Step> {
        let monitor = monitor_of(pod).map_err(|e| ("reach the pod's monitor", e))?;
        let restoring = self.unpack_checkpoint(record).await?;
        let (images, id, image) = (
            self.images.clone(),
            record.id.clone(),
            record.spec.image.clone(),
        );
        let image_use = blocking(move || images.acquire(&id, &image))
            .await
            .map_err(|e| ("find the image", e))?;
        crate::failpoint!("container.create.after_image_hold");
        record.image = self.image_info(&image_use.id.to_string(), &record.spec.image);
        let layout = rootfs::layout(&self.ctx, &record.id);
        let lowerdirs = image_use.lowerdirs.clone();
        let mount_layout = rootfs::layout(&self.ctx, &record.id);
        let userns = super::idmap::PodUserns::open(pod)
            .map_err(|e| ("open the pod's user namespace", e))?
            .map(Arc::new);
        let mount_userns = userns.clone();
        // The pod root's host ids own what the image lacks of its declared volumes.
        let pod_root = userns.as_ref().map(|u| u.maps.root());
        if let Some((_, unpacked)) = &restoring {
            let (id, unpacked, upper) = (record.id.clone(), unpacked.clone(), layout.upper.clone());
            let lowerdirs = lowerdirs.clone();
            blocking(move || restore::apply_diff(&id, &unpacked, &upper, &lowerdirs))
                .await
                .map_err(|e| ("restore the checkpoint's writable layer", e))?;
        }
        blocking(move || rootfs::mount(&mount_layout, &lowerdirs, mount_userns.as_deref()))
            .await
            .map_err(|e| ("mount the root filesystem", e))?;
        crate::failpoint!("container.create.after_rootfs");
        if record.spec.mounts.iter().any(|m| m.image.is_some()) {
            let (images, layout, mut with_volumes) = (
                self.images.clone(),
                rootfs::layout(&self.ctx, &record.id),
                record.clone(),
            );
            *record = blocking(move || {
                super::volumes::mount_all(&images, &layout, &mut with_volumes)
                    .map(|()| with_volumes)
            })
            .await
            .map_err(|e| ("mount the image volumes", e))?;
        }
        if let Some(userns) =
            userns.filter(|_| record.spec.mounts.iter().any(|m| m.id_maps.is_some()))
        {
            let (layout, mut spec) = (rootfs::layout(&self.ctx, &record.id), record.spec.clone());
            record.spec = blocking(move || {
                super::idmap::map_mounts(&layout, &mut spec, &userns).map(|()| spec)
            })
            .await
            .map_err(|e| ("id-map the mounts", e))?;
        }
        let declared = self.declare_volumes(record, &image_use, pod_root).await?;
        let target_pid_ns = self.target_pid_ns(&record.spec)?;
        let (apparmor, security) = (self.ctx.apparmor.clone(), record.spec.security.clone());
        let rootfs = layout.rootfs.clone();
        // One hop to the blocking pool for both: the image's files are the image author's,
        // and a FIFO there must not hold an async worker (`accounts`).
        let (apparmor_default, accounts) = blocking(move || {
            let profile = match super::apparmor::for_container(apparmor.as_ref(), &security) {
                Ok(p) => p,
                Err(e) => return Ok(Err(("check the AppArmor profile", e))),
            };
            let accounts = match super::accounts::read(&rootfs) {
                Ok(a) => a,
                Err(e) => return Ok(Err(("read the image's /etc/passwd and /etc/group", e))),
            };
            Ok::<_, ContainerError>(Ok::<_, Step>((profile, accounts)))
        })
        .await
        .map_err(|e| ("read the image's /etc/passwd and /etc/group", e))??;
        let prepared = prepare::prepare(
            &self.ctx,
            &Inputs {
                id: &record.id,
                pod,
                spec: &record.spec,
                image: &image_use,
                image_name: &record.image.name,
                rootfs: &layout.rootfs,
                cgroup: &record.cgroup,
                target_pid_ns,
                cdi,
                apparmor_default,
                accounts: &accounts,
                declared: &declared,
            },
        )
        .map_err(|e| ("build the OCI spec", e))?;
        let mut prepared = prepared;
        // NRI plugins adjust the spec before anything of the container runs.
        let created = self
            .sandboxes
            .context()
            .nri
            .create_container(&super::plugins::info(record), &mut prepared.spec)
            .await
            .map_err(|e| ("run the NRI plugins' CreateContainer", e.into()))?;
        if !created.cdi_devices.is_empty() {
            self.inject_plugins_cdi(record, &mut prepared.spec, &created.cdi_devices, cdi)
                .await
                .map_err(|e| ("inject the NRI plugins' CDI devices", e))?;
        }
        if let Some(path) = created.cgroups_path {
            prepare::retarget_cgroup(&self.ctx, &mut prepared.spec, &record.cgroup, &path);
            record.cgroup = path;
        }
        record.user = prepared.user;
        record.stop_signal = prepared.stop_signal;
        if record.runtime.is_some() {
            crate::oci::masked_as_runc_reads(&mut prepared.spec);
        }
        if let Some((_, unpacked)) = &restoring {
            unpacked
                .check_mounts(&record.id, &prepared.spec)
                .map_err(|e| ("restore the checkpoint's mounts", e.into()))?;
        }
        let dir = self.ctx.container_dir(&record.id);
        let bundle =
            prepare::write_bundle(&dir, &prepared.spec).map_err(|e| ("write the bundle", e))?;
        crate::failpoint!("container.create.after_bundle");
        prepare_log_dir(record.log_path.as_deref()).map_err(|e| ("create the log directory", e))?;
        // Microseconds on cgroupfs, and only on v1 hosts: no blocking hop (as below).
        let cgroups = &self.ctx.cgroups;
        cgroups
            .create_named_systemd(&record.cgroup)
            .map_err(|e| ("create the container's name=systemd cgroup", e.into()))?;
        let mut req = self.create_request(record, bundle);
        req.restore = restoring.map(|(criu, unpacked)| RestoreRequest {
            criu: criu.path,
            images_dir: unpacked.images_dir,
        });
        let pid = monitor
            .create(req, self.ctx.monitor_timeout)
            .await
            .map_err(ContainerError::monitor(
                &record.id,
                "creating it in the pod's monitor",
            ))
            .map_err(|e| ("create the container", e))?;
        record.pid = Some(pid);
        cgroups
            .join_named_systemd(&record.cgroup, pid)
            .map_err(|e| ("move the container into its name=systemd cgroup", e.into()))?;
        crate::failpoint!("container.create.after_libcontainer_create");
        // Only the systemd driver needs it: no clone and no blocking hop on the cgroupfs path.
        let beyond_systemd = self.ctx.cgroups.writes_beyond_systemd();
        let resources = prepared
            .spec
            .linux()
            .as_ref()
            .and_then(|l| l.resources().as_ref());
        if let Some(resources) = resources.filter(|_| beyond_systemd).cloned() {
            let (ctx, cgroup) = (self.ctx.clone(), record.cgroup.clone());
            blocking(move || ctx.cgroups.apply_beyond_systemd(&cgroup, &resources))
                .await
                .map_err(|e| ("apply the limits systemd does not set", e))?;
        }
        Ok(())
    }

    /// The image's declared volumes, made as `image_volumes` says (`declared`); their copies
    /// are in the layer directory, which a failed create removes. Blocking work off the
    /// async workers: the copy is as large as the image's content there. `owner`: the host
    /// ids of the pod's root, in a pod with a user namespace.
    async fn declare_volumes(
        &self,
        record: &ContainerRecord,
        image: &crate::image::ImageUse,
        owner: Option<(u32, u32)>,
    ) -> Result<Vec<crate::model::MountSpec>, Step> {
        if image.config.volumes.is_empty() {
            return Ok(Vec::new());
        }
        let mode = self.ctx.image_volumes;
        let layout = rootfs::layout(&self.ctx, &record.id);
        let volumes: Vec<String> = image.config.volumes.keys().cloned().collect();
        let mounts = record.spec.mounts.clone();
        blocking(move || declared::make(mode, &layout, volumes.iter(), &mounts, owner))
            .await
            .map_err(|e| ("make the image's declared volumes", e))
    }

    fn create_request(&self, record: &ContainerRecord, bundle: PathBuf) -> CreateRequest {
        let cgroups = &self.ctx.cgroups;
        CreateRequest {
            id: record.id.clone(),
            bundle,
            runtime_root: self.ctx.runtime_root.clone(),
            dir: self.ctx.container_dir(&record.id),
            log_path: record.log_path.clone(),
            tty: record.spec.tty,
            stdin: record.spec.stdin,
            stdin_once: record.spec.stdin_once,
            systemd: cgroups.driver == crate::config::CgroupDriver::Systemd,
            memory_cgroup: Some(cgroups.controller_dir(&record.cgroup, "memory")),
            cgroup_procs: Some(
                cgroups
                    .controller_dir(&record.cgroup, "memory")
                    .join("cgroup.procs"),
            ),
            own_pid_namespace: record.own_pid_namespace,
            runtime: record.runtime.clone(),
            restore: None,
        }
    }

    /// When the request's image is a checkpoint archive, or a checkpoint image (an image whose
    /// manifest carries checkpointctl's or CRI-O's checkpoint annotation): CRIU, and the
    /// checkpoint's files put into the container's layer directory; the record's image
    /// becomes the one it was made from.
    async fn unpack_checkpoint(
        &self,
        record: &mut ContainerRecord,
    ) -> Result<Option<(crate::criu::Criu, restore::Unpacked)>, Step> {
        let source = if restore::is_archive(&record.spec.image) {
            restore::Source::Archive(PathBuf::from(&record.spec.image))
        } else {
            let (images, image) = (self.images.clone(), record.spec.image.clone());
            match blocking(move || images.checkpoint_layer(&image)).await {
                Ok(Some(layer)) => restore::Source::Layer(layer),
                // Not a checkpoint image, or not one that is here: the creation goes on as
                // for any image, and its own lookup says what is missing.
                Ok(None) | Err(_) => return Ok(None),
            }
        };
        self.ctx
            .allows(
                super::checkpoint::Checkpointing::Restore,
                &format!("container {}", record.id),
            )
            .map_err(|e| ("restore the checkpoint", e.into()))?;
        if let Some(rt) = &record.runtime {
            let e = CheckpointError::Unsupported {
                id: record.id.clone(),
                what: format!("a restore under handler {:?}", rt.handler),
            };
            return Err(("restore the checkpoint", e.into()));
        }
        let criu = self
            .ctx
            .criu()
            .await
            .map_err(|e| ("find CRIU for the restore", CheckpointError::from(e).into()))?;
        let id = record.id.clone();
        let layer_dir = self.ctx.layers_dir.join(&record.id);
        let unpacked = blocking(move || restore::unpack(&id, &source, &layer_dir))
            .await
            .map_err(|e| ("unpack the checkpoint archive", e))?;
        record.spec.image = unpacked.image.clone();
        Ok(Some((criu, unpacked)))
    }

    /// The names ContainerStatus reports for the image: its tag (the one the request named,
    /// if it names one) and a digested reference.
    fn image_info(&self, id: &str, requested: &str) -> ImageInfo {
        let view = self.images.status(id).ok().flatten();
        let (tags, digests) = view
            .map(|v| (v.record.repo_tags.clone(), v.record.repo_digests.clone()))
            .unwrap_or_default();
        let wanted = crate::image::ImageRef::parse(requested)
            .ok()
            .and_then(|r| r.tagged());
        let name = tags
            .iter()
            .find(|t| Some(*t) == wanted.as_ref())
            .or(tags.first())
            .cloned()
            .unwrap_or_else(|| requested.to_owned());
        ImageInfo {
            id: id.to_owned(),
            name,
            reference: digests.first().cloned().unwrap_or_else(|| id.to_owned()),
        }
    }

    /// `/proc/<pid>/ns/pid` of the running container a `Target` PID mode names.
    fn target_pid_ns(&self, spec: &ContainerSpec) -> Result<Option<PathBuf>, Step> {
        if spec.security.pid_mode != NamespaceMode::Target {
            return Ok(None);
        }
        let target = self
            .get(&spec.security.pid_target)
            .map_err(|e| ("find the target container", e))?;
        match target.pid {
            Some(pid) if target.phase == Phase::Running => {
                Ok(Some(PathBuf::from(format!("/proc/{pid}/ns/pid"))))
            }
            _ => Err((
                "join the target container's PID namespace",
                ContainerError::State {
                    id: target.id.clone(),
                    state: target.state_name(),
                    what: "share its PID namespace",
                },
            )),
        }
    }
}

/// Decides every path and name the container will use, before anything is created.
fn plan(
    containers: &Containers,
    pod: &SandboxRecord,
    id: String,
    mut spec: ContainerSpec,
) -> ContainerRecord {
    // POD is CRI's zero value: a container of a pod without a shared PID namespace gets one
    // of its own, as with containerd.
    if spec.security.pid_mode == NamespaceMode::Pod && pod.pins.pid.is_none() {
        spec.security.pid_mode = NamespaceMode::Container;
    }
    let log_path = (!spec.log_path.is_empty() && !pod.spec.log_directory.is_empty())
        .then(|| PathBuf::from(&pod.spec.log_directory).join(&spec.log_path));
    let own_pid_namespace = matches!(spec.security.pid_mode, NamespaceMode::Container);
    ContainerRecord {
        cgroup: containers.ctx.cgroups.container_path(&pod.cgroup, &id),
        pod_id: pod.id.clone(),
        created_at: now_nanos(),
        started_at: 0,
        phase: Phase::Creating,
        exit: None,
        pid: None,
        image: ImageInfo::default(),
        user: ResolvedUser::default(),
        stop_signal: nix::sys::signal::Signal::SIGTERM as i32,
        log_path,
        own_pid_namespace,
        image_volumes: Default::default(),
        cdi_devices: Vec::new(),
        runtime: pod.runtime.clone(),
        spec,
        id,
    }
}

/// What a request must hold before anything is created for it.
pub(crate) fn validate(spec: &ContainerSpec) -> Result<(), ContainerError> {
    let invalid = |m: String| Err(ContainerError::Invalid(m));
    if spec.metadata.name.is_empty() {
        return invalid("config.metadata.name is required".into());
    }
    if spec.image.trim().is_empty() {
        return invalid("config.image.image is required".into());
    }
    let s = &spec.security;
    if s.run_as_group.is_some() && s.run_as_user.is_none() && s.run_as_username.is_empty() {
        return invalid(
            "run_as_group is set without run_as_user or run_as_username: a group needs a user"
                .into(),
        );
    }
    if s.pid_mode == NamespaceMode::Target && s.pid_target.is_empty() {
        return invalid("namespace_options.pid is TARGET without a target_id".into());
    }
    if spec.log_path.contains("..") {
        return invalid(format!("log_path {:?} must not contain ..", spec.log_path));
    }
    Ok(())
}

fn prepare_log_dir(path: Option<&std::path::Path>) -> Result<(), ContainerError> {
    let Some(parent) = path.and_then(|p| p.parent()) else {
        return Ok(());
    };
    crate::durable::create_dir_all(parent).map_err(|source| ContainerError::Io {
        what: "creating",
        path: parent.to_owned(),
        source,
    })
}
