//! The events, as `sandbox/` and `container/` call them, at the points containerd calls NRI:
//!
//! - RunPodSandbox: the pod is up (namespaces, network, cgroup) but not yet visible; an error
//!   fails RunPodSandbox, which undoes it and tells plugins StopPodSandbox and
//!   RemovePodSandbox (`run_pod_failed`);
//! - UpdatePodSandbox (UpdatePodSandboxResources, before the pod's cgroup changes; an error
//!   fails it), PostUpdatePodSandbox (after), each time kubelet resizes the pod;
//! - StopPodSandbox (after the pod's containers stopped), RemovePodSandbox;
//! - CreateContainer: the OCI spec is built; plugins adjust it in index order, each seeing the
//!   earlier ones' changes, under the ownership rules; then validating plugins may reject the
//!   result (ValidateContainerAdjustment, `validate.rs`); an error fails CreateContainer, which
//!   undoes it and tells plugins StopContainer and RemoveContainer (`create_failed`);
//! - PostCreateContainer, StartContainer (before the process runs; an error fails the start),
//!   PostStartContainer, UpdateContainer (plugins may change the limits; an error fails the
//!   update), PostUpdateContainer, StopContainer (also when a container exits by itself),
//!   RemoveContainer (after StopContainer, which it sends first if nothing did).
//!
//! Notifications (Stop, Remove, Post-) never fail their CRI call: a plugin's error there is
//! logged, as containerd does. Each pod or container event goes out once.

use super::hub::{Known, to_oci};
use super::merge::{self, Owners, Updates};
use super::ttrpc::CallError;
use super::{
    ContainerInfo, Created, Eviction, Nri, NriError, PodInfo, State, Status, api, spec, validate,
};
use api::Event;

fn bit(e: Event) -> u32 {
    1 << (e as i32)
}

fn name(e: Event) -> &'static str {
    match e {
        Event::RunPodSandbox => "RunPodSandbox",
        Event::StopPodSandbox => "StopPodSandbox",
        Event::RemovePodSandbox => "RemovePodSandbox",
        Event::UpdatePodSandbox => "UpdatePodSandbox",
        Event::PostUpdatePodSandbox => "PostUpdatePodSandbox",
        Event::CreateContainer => "CreateContainer",
        Event::PostCreateContainer => "PostCreateContainer",
        Event::StartContainer => "StartContainer",
        Event::PostStartContainer => "PostStartContainer",
        Event::UpdateContainer => "UpdateContainer",
        Event::PostUpdateContainer => "PostUpdateContainer",
        Event::StopContainer => "StopContainer",
        Event::RemoveContainer => "RemoveContainer",
        Event::ValidateContainerAdjustment => "ValidateContainerAdjustment",
        _ => "an unknown event",
    }
}

/// OCI resources as NRI's messages carry them.
fn nri_resources(r: &oci_spec::runtime::LinuxResources) -> api::LinuxResources {
    spec::resources(&serde_json::to_value(r).unwrap_or_default())
}

/// The pod as NRI's messages carry it.
fn pod_message(p: &PodInfo) -> api::PodSandbox {
    api::PodSandbox {
        id: p.id.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        namespace: p.namespace.clone(),
        labels: p.labels.clone().into_iter().collect(),
        annotations: p.annotations.clone().into_iter().collect(),
        runtime_handler: p.runtime_handler.clone(),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent: p.cgroup_parent.clone(),
            cgroups_path: p.cgroups_path.clone(),
            namespaces: p
                .namespaces
                .iter()
                .map(|(t, path)| api::LinuxNamespace {
                    r#type: t.clone(),
                    path: path.clone(),
                })
                .collect(),
            pod_resources: p.resources.as_ref().map(nri_resources),
            pod_overhead: p.overhead.as_ref().map(nri_resources),
            ..Default::default()
        }),
        pid: p.pid,
        ips: p.ips.clone(),
    }
}

fn set_status(c: &mut api::Container, s: &Status) {
    c.state = spec::state(s.state) as i32;
    c.pid = s.pid;
    if s.started_at != 0 {
        c.started_at = s.started_at;
    }
    c.finished_at = s.finished_at;
    c.exit_code = s.exit_code;
    c.status_reason = s.reason.clone();
    c.status_message = s.message.clone();
}

/// What a plugin's answer to an event means for the event.
enum Verdict<T> {
    Answer(T),
    /// Timed out or disconnected: dropped, and the event goes on without it.
    Dropped,
}

impl Nri {
    /// Calls one plugin; a fatal error drops it.
    async fn ask<Req: prost::Message, Resp: prost::Message + Default>(
        &self,
        plugin: &super::plugin::Plugin,
        event: Event,
        req: &Req,
    ) -> Result<Verdict<Resp>, NriError> {
        match plugin.call::<Req, Resp>(name(event), req).await {
            Ok(r) => Ok(Verdict::Answer(r)),
            Err(e) => self.failed(plugin, event, e).map(|()| Verdict::Dropped),
        }
    }

    fn failed(
        &self,
        plugin: &super::plugin::Plugin,
        event: Event,
        e: CallError,
    ) -> Result<(), NriError> {
        if e.is_fatal() {
            tracing::warn!(plugin = %plugin.name(), event = name(event), error = %e, "dropping NRI plugin");
            plugin.close();
            return Ok(());
        }
        Err(NriError::Plugin {
            plugin: plugin.name(),
            event: name(event),
            message: e.to_string(),
        })
    }

    /// Sends a notification about a pod (and one of its containers) to every subscribed
    /// plugin; the first plugin error ends it.
    async fn notify(
        &self,
        event: Event,
        pod: &api::PodSandbox,
        container: Option<&api::Container>,
    ) -> Result<(), NriError> {
        // Every pod event's request is {pod}, every container event's {pod, container}: one
        // message type of each shape encodes them all.
        for p in self.plugins().iter().filter(|p| p.subscribed(event)) {
            let sent = match container {
                None => {
                    let req = api::RunPodSandboxRequest {
                        pod: Some(pod.clone()),
                    };
                    p.notify(name(event), &req, event, pod, None).await
                }
                Some(c) => {
                    let req = api::PostCreateContainerRequest {
                        pod: Some(pod.clone()),
                        container: Some(c.clone()),
                    };
                    p.notify(name(event), &req, event, pod, Some(c)).await
                }
            };
            if let Err(e) = sent {
                self.failed(p, event, e)?;
            }
        }
        Ok(())
    }

    fn pod_of(&self, id: &str) -> api::PodSandbox {
        self.lock_table()
            .pods
            .get(id)
            .map(|k| k.object.clone())
            .unwrap_or_else(|| api::PodSandbox {
                id: id.to_owned(),
                ..Default::default()
            })
    }

    // --- pods

    /// RunPodSandbox: the pod is known to plugins from now on (until `run_pod_failed`).
    pub async fn run_pod(&self, pod: &PodInfo) -> Result<(), NriError> {
        if !self.enabled() {
            return Ok(());
        }
        let message = pod_message(pod);
        let _gate = self.gate.read().await;
        let mut known = Known::new(message.clone());
        known.sent = bit(Event::RunPodSandbox);
        self.lock_table().pods.insert(pod.id.clone(), known);
        self.notify(Event::RunPodSandbox, &message, None).await
    }

    /// A RunPodSandbox that failed after `run_pod`: plugins hear the pod stop and go.
    pub async fn run_pod_failed(&self, id: &str) {
        self.remove_pod(id).await;
    }

    /// A pod found at start (no event: plugins that connect learn of it in their sync).
    pub fn adopt_pod(&self, pod: &PodInfo, stopped: bool) {
        if !self.enabled() {
            return;
        }
        let mut known = Known::new(pod_message(pod));
        known.sent = bit(Event::RunPodSandbox)
            | if stopped {
                bit(Event::StopPodSandbox)
            } else {
                0
            };
        self.lock_table().pods.insert(pod.id.clone(), known);
    }

    /// UpdatePodSandboxResources, before the pod's cgroup changes: each subscribed plugin is
    /// told the pod's new figures; an error fails the update, as containerd has it. Once all
    /// accepted, the pod as plugins know it carries the figures.
    pub async fn update_pod(&self, pod: &PodInfo) -> Result<(), NriError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(turn) = self.lock_table().pods.get(&pod.id).map(|k| k.turn.clone()) else {
            return Ok(());
        };
        let _turn = turn.lock().await;
        let _gate = self.gate.read().await;
        let message = pod_message(pod);
        let event = Event::UpdatePodSandbox;
        let linux = message.linux.clone().unwrap_or_default();
        for p in self.plugins().iter().filter(|p| p.subscribed(event)) {
            let req = api::UpdatePodSandboxRequest {
                pod: Some(message.clone()),
                overhead_linux_resources: linux.pod_overhead.clone(),
                linux_resources: linux.pod_resources.clone(),
            };
            self.ask::<_, api::UpdatePodSandboxResponse>(p, event, &req)
                .await?;
        }
        // Accepted: later events and synchronizations show the new figures.
        if let Some(k) = self.lock_table().pods.get_mut(&pod.id) {
            k.object = message;
        }
        Ok(())
    }

    /// PostUpdatePodSandbox: the pod's cgroup has its new figures; a plugin's error is logged.
    pub async fn post_update_pod(&self, id: &str) {
        if !self.enabled() {
            return;
        }
        let Some(turn) = self.lock_table().pods.get(id).map(|k| k.turn.clone()) else {
            return;
        };
        let _turn = turn.lock().await;
        let _gate = self.gate.read().await;
        let pod = self.pod_of(id);
        if let Err(e) = self.notify(Event::PostUpdatePodSandbox, &pod, None).await {
            tracing::warn!(pod_id = %id, error = %e, "NRI notification failed");
        }
    }

    pub async fn stop_pod(&self, id: &str) {
        self.pod_event(id, Event::StopPodSandbox).await;
    }

    /// RemovePodSandbox (StopPodSandbox first if it did not go out); the pod is forgotten.
    pub async fn remove_pod(&self, id: &str) {
        self.pod_event(id, Event::StopPodSandbox).await;
        self.pod_event(id, Event::RemovePodSandbox).await;
        let mut t = self.lock_table();
        t.pods.remove(id);
        t.containers.retain(|_, c| c.object.pod_sandbox_id != id);
    }

    /// A pod notification, once; a plugin's error is logged.
    async fn pod_event(&self, id: &str, event: Event) {
        if !self.enabled() {
            return;
        }
        let Some(turn) = self.lock_table().pods.get(id).map(|k| k.turn.clone()) else {
            return;
        };
        let _turn = turn.lock().await;
        let _gate = self.gate.read().await;
        let pod = {
            let mut t = self.lock_table();
            let Some(k) = t.pods.get_mut(id) else { return };
            if k.sent & bit(event) != 0 {
                return;
            }
            k.sent |= bit(event);
            k.object.clone()
        };
        if let Err(e) = self.notify(event, &pod, None).await {
            tracing::warn!(pod_id = %id, error = %e, "NRI notification failed");
        }
    }

    // --- containers

    /// CreateContainer: plugins adjust `spec` (in place) in index order.
    pub async fn create_container(
        &self,
        info: &ContainerInfo,
        spec: &mut oci_spec::runtime::Spec,
    ) -> Result<Created, NriError> {
        if !self.enabled() {
            return Ok(Created::default());
        }
        let event = Event::CreateContainer;
        let adjust_error = |plugin: &str, message: String| NriError::Adjustment {
            plugin: plugin.to_owned(),
            message,
        };
        let mut json =
            serde_json::to_value(&*spec).map_err(|e| adjust_error("-", e.to_string()))?;
        let status = Status::default();
        let mut container = spec::container(info, &json, &status);
        let _gate = self.gate.read().await;
        let pod = self.pod_of(&info.pod_id);
        let mut known = Known::new(container.clone());
        known.sent = bit(event);
        self.lock_table().containers.insert(info.id.clone(), known);
        let (mut owners, mut updates) = (Owners::default(), Updates::default());
        let (mut evictions, mut created, mut adjusted) = (Vec::new(), Created::default(), false);
        let mut adjusters: Vec<String> = Vec::new();
        let (pristine, mut adjustments) = (container.clone(), Vec::new());
        for p in self.plugins().iter().filter(|p| p.subscribed(event)) {
            let req = api::CreateContainerRequest {
                pod: Some(pod.clone()),
                container: Some(container.clone()),
            };
            let Verdict::Answer(answer) = self
                .ask::<_, api::CreateContainerResponse>(p, event, &req)
                .await?
            else {
                continue;
            };
            let plugin = p.name();
            if let Some(adj) = &answer.adjust {
                adjusters.push(plugin.clone());
                adjustments.push(adj.clone());
                merge::claim_adjustment(&mut owners, &info.id, adj, &plugin).map_err(
                    |message| NriError::Conflict {
                        event: name(event),
                        message,
                    },
                )?;
                created.cdi_devices.extend(
                    adj.cdi_devices
                        .iter()
                        .map(|d| (d.name.clone(), plugin.clone())),
                );
                spec::apply(adj, &mut json).map_err(|m| adjust_error(&plugin, m))?;
                if let Some(path) = adj
                    .linux
                    .as_ref()
                    .map(|l| &l.cgroups_path)
                    .filter(|p| !p.is_empty())
                {
                    created.cgroups_path = Some(path.clone());
                }
                container = spec::container(info, &json, &status);
                adjusted = true;
            }
            if answer.update.iter().any(|u| u.container_id == info.id) {
                return Err(adjust_error(
                    &plugin,
                    "it asked for an update of the container being created".into(),
                ));
            }
            updates
                .add(&mut owners, &answer.update, &plugin)
                .map_err(|message| NriError::Conflict {
                    event: name(event),
                    message,
                })?;
            evictions.extend(answer.evict);
        }
        let proposal = validate::Proposal {
            adjustments: &adjustments,
            updates: &updates,
            owners: &owners,
        };
        self.validate(&pod, &pristine, proposal).await?;
        if adjusted {
            *spec = serde_json::from_value(json).map_err(|e| NriError::Adjustment {
                plugin: adjusters.join(", "),
                message: format!("the adjusted spec is not a valid OCI spec: {e}"),
            })?;
            if let Some(k) = self.lock_table().containers.get_mut(&info.id) {
                k.object = container;
            }
        }
        self.side_effects(updates, evictions);
        Ok(created)
    }

    /// ValidateContainerAdjustment: every validating plugin sees what CreateContainer's plugins
    /// would do; the first that rejects it (or fails) fails the creation.
    async fn validate(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        proposal: validate::Proposal<'_>,
    ) -> Result<(), NriError> {
        let event = Event::ValidateContainerAdjustment;
        let plugins = self.plugins();
        if !plugins.iter().any(|p| p.subscribed(event)) {
            return Ok(());
        }
        let consulted = plugins
            .iter()
            .map(|p| (p.base.clone(), p.idx.clone()))
            .collect();
        let req = validate::request(pod, container, proposal, consulted);
        for p in plugins.iter().filter(|p| p.subscribed(event)) {
            if let Verdict::Answer(answer) = self
                .ask::<_, api::ValidateContainerAdjustmentResponse>(p, event, &req)
                .await?
            {
                validate::rejection(p.name(), &answer)?;
            }
        }
        Ok(())
    }

    /// A CreateContainer that failed after `create_container`: plugins hear the container stop
    /// and go.
    pub async fn create_failed(&self, id: &str) {
        self.remove_container(id).await;
    }

    /// A container found at start (no event).
    pub fn adopt_container(
        &self,
        info: &ContainerInfo,
        spec: &oci_spec::runtime::Spec,
        status: &Status,
    ) {
        if !self.enabled() {
            return;
        }
        let Ok(json) = serde_json::to_value(spec) else {
            return;
        };
        let mut known = Known::new(spec::container(info, &json, status));
        known.sent = bit(Event::CreateContainer) | bit(Event::PostCreateContainer);
        if status.state != State::Created {
            known.sent |= bit(Event::StartContainer) | bit(Event::PostStartContainer);
        }
        if status.state == State::Stopped {
            known.sent |= bit(Event::StopContainer);
        }
        self.lock_table().containers.insert(info.id.clone(), known);
    }

    pub async fn post_create(&self, id: &str, status: &Status) {
        let _ = self
            .container_event(id, Event::PostCreateContainer, Some(status))
            .await;
    }

    /// StartContainer, before the process runs: a plugin's error fails the start.
    pub async fn start_container(&self, id: &str) -> Result<(), NriError> {
        self.container_event(id, Event::StartContainer, None).await
    }

    pub async fn post_start(&self, id: &str, status: &Status) {
        let _ = self
            .container_event(id, Event::PostStartContainer, Some(status))
            .await;
    }

    /// StopContainer, once, when the container's exit is recorded (whoever stopped it).
    pub async fn stop_container(&self, id: &str, status: &Status) {
        let _ = self
            .container_event(id, Event::StopContainer, Some(status))
            .await;
    }

    /// RemoveContainer (StopContainer first if it did not go out); the container is forgotten.
    pub async fn remove_container(&self, id: &str) {
        let stopped = Status {
            state: State::Stopped,
            ..Default::default()
        };
        let _ = self
            .container_event(id, Event::StopContainer, Some(&stopped))
            .await;
        let _ = self.container_event(id, Event::RemoveContainer, None).await;
        self.lock_table().containers.remove(id);
    }

    /// A container event, once per container (Update and PostUpdate may repeat). Only
    /// StartContainer's plugin errors are returned; the others are logged.
    async fn container_event(
        &self,
        id: &str,
        event: Event,
        status: Option<&Status>,
    ) -> Result<(), NriError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(turn) = self.lock_table().containers.get(id).map(|k| k.turn.clone()) else {
            return Ok(());
        };
        let _turn = turn.lock().await;
        let _gate = self.gate.read().await;
        let once = !matches!(event, Event::UpdateContainer | Event::PostUpdateContainer);
        let container = {
            let mut t = self.lock_table();
            let Some(k) = t.containers.get_mut(id) else {
                return Ok(());
            };
            if once && k.sent & bit(event) != 0 {
                return Ok(());
            }
            k.sent |= bit(event);
            if let Some(s) = status {
                set_status(&mut k.object, s);
            }
            k.object.clone()
        };
        let pod = self.pod_of(&container.pod_sandbox_id);
        let delivered = if event == Event::StopContainer {
            self.stop_with_updates(&pod, &container).await
        } else {
            self.notify(event, &pod, Some(&container)).await
        };
        match delivered {
            Err(e) if event != Event::StartContainer => {
                tracing::warn!(container_id = %id, error = %e, "NRI notification failed");
                Ok(())
            }
            other => other,
        }
    }

    /// StopContainer's answers may update other containers.
    async fn stop_with_updates(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Result<(), NriError> {
        let event = Event::StopContainer;
        let (mut owners, mut updates) = (Owners::default(), Updates::default());
        for p in self.plugins().iter().filter(|p| p.subscribed(event)) {
            let req = api::StopContainerRequest {
                pod: Some(pod.clone()),
                container: Some(container.clone()),
            };
            if let Verdict::Answer(a) = self
                .ask::<_, api::StopContainerResponse>(p, event, &req)
                .await?
            {
                updates
                    .add(&mut owners, &a.update, &p.name())
                    .map_err(|message| NriError::Conflict {
                        event: name(event),
                        message,
                    })?;
            }
        }
        self.side_effects(updates, Vec::new());
        Ok(())
    }

    /// UpdateContainerResources: plugins may change the `requested` limits; returns what to
    /// apply. Their updates of other containers are applied in the background.
    pub async fn update_container(
        &self,
        id: &str,
        requested: &oci_spec::runtime::LinuxResources,
    ) -> Result<oci_spec::runtime::LinuxResources, NriError> {
        if !self.enabled() {
            return Ok(requested.clone());
        }
        let Some(turn) = self.lock_table().containers.get(id).map(|k| k.turn.clone()) else {
            return Ok(requested.clone());
        };
        let event = Event::UpdateContainer;
        let _turn = turn.lock().await;
        let _gate = self.gate.read().await;
        let Some(container) = self
            .lock_table()
            .containers
            .get(id)
            .map(|k| k.object.clone())
        else {
            return Ok(requested.clone());
        };
        let pod = self.pod_of(&container.pod_sandbox_id);
        let json = serde_json::to_value(requested).unwrap_or_default();
        let mut wanted = spec::resources(&json);
        let (mut owners, mut updates, mut evictions) =
            (Owners::default(), Updates::default(), Vec::new());
        let mut updaters = Vec::new();
        for p in self.plugins().iter().filter(|p| p.subscribed(event)) {
            let req = api::UpdateContainerRequest {
                pod: Some(pod.clone()),
                container: Some(container.clone()),
                linux_resources: Some(wanted.clone()),
            };
            if let Verdict::Answer(a) = self
                .ask::<_, api::UpdateContainerResponse>(p, event, &req)
                .await?
            {
                if a.update.iter().any(|u| u.container_id == id) {
                    updaters.push(p.name());
                }
                updates
                    .add(&mut owners, &a.update, &p.name())
                    .map_err(|message| NriError::Conflict {
                        event: name(event),
                        message,
                    })?;
                evictions.extend(a.evict);
            }
        }
        let changed = updates.take(id);
        if let Some(r) = &changed {
            merge::overlay(&mut wanted, r);
        }
        if let Some(k) = self.lock_table().containers.get_mut(id) {
            if let Some(l) = k.object.linux.as_mut() {
                let current = l.resources.get_or_insert_with(Default::default);
                merge::overlay(current, &wanted);
            }
        }
        self.side_effects(updates, evictions);
        match changed {
            None => Ok(requested.clone()),
            Some(_) => to_oci(&wanted).map_err(|message| NriError::Adjustment {
                plugin: updaters.join(", "),
                message,
            }),
        }
    }

    pub async fn post_update(&self, id: &str) {
        let _ = self
            .container_event(id, Event::PostUpdateContainer, None)
            .await;
    }

    /// Limits a plugin applied to a live container outside an event (UpdateContainers), so
    /// later events and synchronizations show them.
    pub fn updated(&self, id: &str, resources: &oci_spec::runtime::LinuxResources) {
        let Ok(json) = serde_json::to_value(resources) else {
            return;
        };
        let r = spec::resources(&json);
        if let Some(k) = self.lock_table().containers.get_mut(id) {
            if let Some(l) = k.object.linux.as_mut() {
                merge::overlay(l.resources.get_or_insert_with(Default::default), &r);
            }
        }
    }

    fn side_effects(&self, mut updates: Updates, evictions: Vec<api::ContainerEviction>) {
        let merged: Vec<api::ContainerUpdate> = std::mem::take(&mut updates.merged)
            .into_iter()
            .map(|(id, r, ignore)| api::ContainerUpdate {
                container_id: id,
                linux: Some(api::LinuxContainerUpdate { resources: Some(r) }),
                ignore_failure: ignore,
            })
            .collect();
        if merged.is_empty() && evictions.is_empty() {
            return;
        }
        let evictions = evictions
            .into_iter()
            .map(|e| Eviction {
                container_id: e.container_id,
                reason: e.reason,
            })
            .collect();
        // Refused ones were logged; no plugin waits on these.
        let (updates, _refused) = self.resource_updates(&merged);
        self.apply_effects(updates, evictions);
    }
}
