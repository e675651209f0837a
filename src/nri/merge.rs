//! NRI's ownership rules (`pkg/api/owners.go`, `pkg/adaptation/result.go`): within one event,
//! each field of a container (and each entry of a map or list field: an annotation, a mount
//! destination, an environment variable, a device path, a hugepage size, ...) may be set by one
//! plugin only. A second plugin setting it fails the event with an error naming both plugins
//! and the field, in NRI's words. A plugin may remove what an earlier one set (`-` markers),
//! and then set it again itself. Hooks accumulate: every plugin may add some.
//!
//! Updates of other containers merge the same way, per container.

use std::collections::HashMap;

use super::api::{self, Field};

/// Who set what, for one event.
#[derive(Default)]
pub struct Owners {
    simple: HashMap<(String, i32), String>,
    compound: HashMap<(String, i32, String), String>,
}

impl Owners {
    fn claim(
        &mut self,
        id: &str,
        field: Field,
        key: Option<&str>,
        plugin: &str,
    ) -> Result<(), String> {
        let slot = match key {
            Some(k) => self
                .compound
                .entry((id.to_owned(), field as i32, k.to_owned())),
            None => {
                return claim_slot(
                    self.simple.entry((id.to_owned(), field as i32)),
                    field,
                    key,
                    plugin,
                );
            }
        };
        claim_slot(slot, field, key, plugin)
    }

    /// Who set what, as NRI's messages carry it (ValidateContainerAdjustment); entries a
    /// plugin removed and left unset are owned by none and left out.
    pub fn to_api(&self) -> api::OwningPlugins {
        let mut out = api::OwningPlugins::default();
        let set = |owner: &String| !owner.starts_with('-');
        for ((id, field), owner) in self.simple.iter().filter(|(_, o)| set(o)) {
            let owners = out.owners.entry(id.clone()).or_default();
            owners.simple.insert(*field, owner.clone());
        }
        for ((id, field, key), owner) in self.compound.iter().filter(|(_, o)| set(o)) {
            let owners = out.owners.entry(id.clone()).or_default();
            let compound = owners.compound.entry(*field).or_default();
            compound.owners.insert(key.clone(), owner.clone());
        }
        out
    }

    /// Marks an entry removed by `plugin`, which may then set it again.
    fn clear(&mut self, id: &str, field: Field, key: Option<&str>, plugin: &str) {
        let mark = format!("-{plugin}");
        match key {
            Some(k) => {
                self.compound
                    .insert((id.to_owned(), field as i32, k.to_owned()), mark);
            }
            None => {
                self.simple.insert((id.to_owned(), field as i32), mark);
            }
        }
    }
}

fn claim_slot<K>(
    slot: std::collections::hash_map::Entry<'_, K, String>,
    field: Field,
    key: Option<&str>,
    plugin: &str,
) -> Result<(), String> {
    use std::collections::hash_map::Entry;
    match slot {
        Entry::Vacant(v) => {
            v.insert(plugin.to_owned());
            Ok(())
        }
        Entry::Occupied(mut o) => {
            let other = o.get().clone();
            match other.strip_prefix('-') {
                Some(clearer) if clearer == plugin => {
                    o.insert(plugin.to_owned());
                    Ok(())
                }
                Some(clearer) => Err(conflict(plugin, clearer, field, key)),
                None => Err(conflict(plugin, &other, field, key)),
            }
        }
    }
}

fn conflict(plugin: &str, other: &str, field: Field, key: Option<&str>) -> String {
    format!(
        "plugins {plugin:?} and {other:?} both tried to set {} {}",
        field.as_str_name(),
        key.unwrap_or_default()
    )
    .trim_end()
    .to_owned()
}

/// Claims every field `adjust` sets on container `id` for `plugin`.
pub fn claim_adjustment(
    owners: &mut Owners,
    id: &str,
    adjust: &api::ContainerAdjustment,
    plugin: &str,
) -> Result<(), String> {
    keyed(
        owners,
        id,
        Field::Annotations,
        adjust.annotations.keys(),
        plugin,
    )?;
    keyed(
        owners,
        id,
        Field::Mounts,
        adjust.mounts.iter().map(|m| &m.destination),
        plugin,
    )?;
    keyed(
        owners,
        id,
        Field::Env,
        adjust.env.iter().map(|e| &e.key),
        plugin,
    )?;
    if let Some(first) = adjust.args.first() {
        if first.is_empty() {
            owners.clear(id, Field::Args, None, plugin);
        }
        owners.claim(id, Field::Args, None, plugin)?;
    }
    for r in &adjust.rlimits {
        owners.claim(id, Field::Rlimits, Some(&r.r#type), plugin)?;
    }
    for d in &adjust.cdi_devices {
        owners.claim(id, Field::CdiDevices, Some(&d.name), plugin)?;
    }
    let Some(l) = &adjust.linux else {
        return Ok(());
    };
    keyed(
        owners,
        id,
        Field::Devices,
        l.devices.iter().map(|d| &d.path),
        plugin,
    )?;
    keyed(owners, id, Field::Sysctl, l.sysctl.keys(), plugin)?;
    for n in &l.namespaces {
        let kind = n.r#type.strip_prefix('-').unwrap_or(&n.r#type);
        owners.claim(id, Field::Namespace, Some(kind), plugin)?;
    }
    if let Some(r) = &l.resources {
        claim_resources(owners, id, r, plugin)?;
    }
    let simple = [
        (!l.cgroups_path.is_empty(), Field::CgroupsPath),
        (l.oom_score_adj.is_some(), Field::OomScoreAdj),
        (l.io_priority.is_some(), Field::IoPriority),
        (l.seccomp_policy.is_some(), Field::SeccompPolicy),
        (l.scheduler.is_some(), Field::LinuxSched),
        (l.memory_policy.is_some(), Field::MemoryPolicy),
    ];
    for (_, field) in simple.into_iter().filter(|(set, _)| *set) {
        owners.claim(id, field, None, plugin)?;
    }
    Ok(())
}

/// Entries of a keyed field: `-key` clears, anything else claims (clears first, as NRI).
fn keyed<'a>(
    owners: &mut Owners,
    id: &str,
    field: Field,
    keys: impl Iterator<Item = &'a String>,
    plugin: &str,
) -> Result<(), String> {
    let keys: Vec<&String> = keys.collect();
    for k in keys.iter().filter_map(|k| k.strip_prefix('-')) {
        owners.clear(id, field, Some(k), plugin);
    }
    for k in keys.iter().filter(|k| !k.starts_with('-')) {
        owners.claim(id, field, Some(k), plugin)?;
    }
    Ok(())
}

/// Claims every resource `r` sets on container `id` for `plugin`.
pub fn claim_resources(
    owners: &mut Owners,
    id: &str,
    r: &api::LinuxResources,
    plugin: &str,
) -> Result<(), String> {
    let mut fields = Vec::new();
    if let Some(m) = &r.memory {
        let set = [
            (m.limit.is_some(), Field::MemLimit),
            (m.reservation.is_some(), Field::MemReservation),
            (m.swap.is_some(), Field::MemSwapLimit),
            (m.kernel.is_some(), Field::MemKernelLimit),
            (m.kernel_tcp.is_some(), Field::MemTcpLimit),
            (m.swappiness.is_some(), Field::MemSwappiness),
            (m.disable_oom_killer.is_some(), Field::MemDisableOomKiller),
            (m.use_hierarchy.is_some(), Field::MemUseHierarchy),
        ];
        fields.extend(set.into_iter().filter(|(s, _)| *s).map(|(_, f)| f));
    }
    if let Some(c) = &r.cpu {
        let set = [
            (c.shares.is_some(), Field::CpuShares),
            (c.quota.is_some(), Field::CpuQuota),
            (c.period.is_some(), Field::CpuPeriod),
            (c.realtime_runtime.is_some(), Field::CpuRealtimeRuntime),
            (c.realtime_period.is_some(), Field::CpuRealtimePeriod),
            (!c.cpus.is_empty(), Field::CpuSetCpUs),
            (!c.mems.is_empty(), Field::CpuSetMems),
        ];
        fields.extend(set.into_iter().filter(|(s, _)| *s).map(|(_, f)| f));
    }
    let simple = [
        (r.blockio_class.is_some(), Field::BlockioClass),
        (r.rdt_class.is_some(), Field::RdtClass),
        (r.pids.is_some(), Field::PidsLimit),
    ];
    fields.extend(simple.into_iter().filter(|(s, _)| *s).map(|(_, f)| f));
    for f in fields {
        owners.claim(id, f, None, plugin)?;
    }
    for h in &r.hugepage_limits {
        owners.claim(id, Field::HugepageLimits, Some(&h.page_size), plugin)?;
    }
    for k in r.unified.keys() {
        owners.claim(id, Field::CgroupsUnified, Some(k), plugin)?;
    }
    Ok(())
}

/// Sets on `dst` every NRI resource `src` sets.
pub fn overlay(dst: &mut api::LinuxResources, src: &api::LinuxResources) {
    if let Some(m) = &src.memory {
        let d = dst.memory.get_or_insert_with(Default::default);
        macro_rules! take {
            ($($f:ident),*) => { $( if m.$f.is_some() { d.$f = m.$f.clone(); } )* };
        }
        take!(
            limit,
            reservation,
            swap,
            kernel,
            kernel_tcp,
            swappiness,
            disable_oom_killer,
            use_hierarchy
        );
    }
    if let Some(c) = &src.cpu {
        let d = dst.cpu.get_or_insert_with(Default::default);
        macro_rules! take {
            ($($f:ident),*) => { $( if c.$f.is_some() { d.$f = c.$f.clone(); } )* };
        }
        take!(shares, quota, period, realtime_runtime, realtime_period);
        if !c.cpus.is_empty() {
            d.cpus = c.cpus.clone();
        }
        if !c.mems.is_empty() {
            d.mems = c.mems.clone();
        }
    }
    for h in &src.hugepage_limits {
        dst.hugepage_limits.retain(|x| x.page_size != h.page_size);
        dst.hugepage_limits.push(h.clone());
    }
    dst.unified.extend(src.unified.clone());
    if src.pids.is_some() {
        dst.pids = src.pids;
    }
    if src.blockio_class.is_some() {
        dst.blockio_class = src.blockio_class.clone();
    }
    if src.rdt_class.is_some() {
        dst.rdt_class = src.rdt_class.clone();
    }
}

/// Updates of containers collected over the plugins of one event, merged per container.
#[derive(Default)]
pub struct Updates {
    /// In the order plugins first named each container.
    pub merged: Vec<(String, api::LinuxResources, bool)>,
}

impl Updates {
    /// Adds `plugin`'s updates. An update the ownership rules refuse fails the event, unless the
    /// plugin said its failure may be ignored (then it is dropped).
    pub fn add(
        &mut self,
        owners: &mut Owners,
        updates: &[api::ContainerUpdate],
        plugin: &str,
    ) -> Result<(), String> {
        for u in updates {
            let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            if let Err(e) = claim_resources(owners, &u.container_id, r, plugin) {
                if u.ignore_failure {
                    continue;
                }
                return Err(e);
            }
            match self
                .merged
                .iter_mut()
                .find(|(id, ..)| *id == u.container_id)
            {
                Some((_, acc, ignore)) => {
                    overlay(acc, r);
                    *ignore = *ignore && u.ignore_failure;
                }
                None => self
                    .merged
                    .push((u.container_id.clone(), r.clone(), u.ignore_failure)),
            }
        }
        Ok(())
    }

    /// Takes the merged update of container `id` out, if a plugin updated it.
    pub fn take(&mut self, id: &str) -> Option<api::LinuxResources> {
        let at = self.merged.iter().position(|(i, ..)| i == id)?;
        Some(self.merged.remove(at).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(dest: &str) -> api::ContainerAdjustment {
        api::ContainerAdjustment {
            mounts: vec![api::Mount {
                destination: dest.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn two_plugins_setting_one_field_name_both() {
        let mut o = Owners::default();
        claim_adjustment(&mut o, "c", &mount("/data"), "10-a").unwrap();
        claim_adjustment(&mut o, "c", &mount("/other"), "20-b").unwrap();
        let e = claim_adjustment(&mut o, "c", &mount("/data"), "20-b").unwrap_err();
        assert_eq!(
            e,
            "plugins \"20-b\" and \"10-a\" both tried to set Mounts /data"
        );
        let mem = |v| api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                resources: Some(api::LinuxResources {
                    memory: Some(api::LinuxMemory {
                        limit: Some(api::OptionalInt64 { value: v }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        claim_adjustment(&mut o, "c", &mem(1), "10-a").unwrap();
        let e = claim_adjustment(&mut o, "c", &mem(2), "20-b").unwrap_err();
        assert!(
            e.contains("10-a") && e.contains("20-b") && e.contains("MemLimit"),
            "{e}"
        );
    }

    #[test]
    fn a_plugin_may_remove_and_set_again_what_another_set() {
        let mut o = Owners::default();
        claim_adjustment(&mut o, "c", &mount("/data"), "10-a").unwrap();
        claim_adjustment(&mut o, "c", &mount("-/data"), "20-b").unwrap();
        claim_adjustment(&mut o, "c", &mount("/data"), "20-b").unwrap();
        // Hooks never conflict.
        let hooks = api::ContainerAdjustment {
            hooks: Some(api::Hooks::default()),
            ..Default::default()
        };
        claim_adjustment(&mut o, "c", &hooks, "10-a").unwrap();
        claim_adjustment(&mut o, "c", &hooks, "20-b").unwrap();
    }

    #[test]
    fn updates_merge_per_container_and_conflict_unless_ignorable() {
        let upd =
            |id: &str, shares: Option<u64>, quota: Option<i64>, ignore| api::ContainerUpdate {
                container_id: id.into(),
                linux: Some(api::LinuxContainerUpdate {
                    resources: Some(api::LinuxResources {
                        cpu: Some(api::LinuxCpu {
                            shares: shares.map(|value| api::OptionalUInt64 { value }),
                            quota: quota.map(|value| api::OptionalInt64 { value }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                }),
                ignore_failure: ignore,
            };
        let (mut o, mut u) = (Owners::default(), Updates::default());
        u.add(&mut o, &[upd("x", Some(2), None, false)], "10-a")
            .unwrap();
        u.add(&mut o, &[upd("x", None, Some(5), false)], "20-b")
            .unwrap();
        u.add(&mut o, &[upd("x", Some(9), None, true)], "30-c")
            .unwrap();
        assert!(
            u.add(&mut o, &[upd("x", Some(9), None, false)], "30-c")
                .is_err()
        );
        let cpu = u.take("x").unwrap().cpu.unwrap();
        assert_eq!(
            (cpu.shares.unwrap().value, cpu.quota.unwrap().value),
            (2, 5)
        );
        assert!(u.take("x").is_none());
    }
}
