//! The limits the systemd driver cannot set as a scope's unit properties, written to the
//! scope's own cgroup files once systemd made it, as runc's systemd driver does (its fs
//! manager writes every limit after the unit's properties). systemd has no hugetlb property
//! and enables no hugetlb controller below the root, and has no property for most keys of the
//! CRI `unified` map (`io.weight`, `memory.swap.max`, ...). libcgroups' systemd manager drops
//! both, at most with a log line: without this a hugepage or `unified` limit would be accepted
//! and never enforced.

use std::path::Path;

use oci_spec::runtime::LinuxResources;

/// The `unified` keys libcgroups' systemd manager turns into unit properties itself.
const AS_PROPERTIES: &[&str] = &[
    "cpu.weight",
    "cpu.max",
    "cpuset.cpus",
    "cpuset.mems",
    "memory.min",
    "memory.low",
    "memory.high",
    "memory.max",
    "pids.max",
];

/// Writes what systemd left out into `scope`, a cgroup directory below the v2 `root`. Keys and
/// page sizes were checked to be plain file names when the spec was built.
pub(super) fn write(root: &Path, scope: &Path, r: &LinuxResources) -> Result<(), String> {
    let huge = r.hugepage_limits().as_deref().unwrap_or_default();
    if !huge.is_empty() {
        enable_down_to(root, scope, "hugetlb")?;
    }
    for h in huge {
        let limit = h.limit().to_string();
        write_file(scope, &format!("hugetlb.{}.max", h.page_size()), &limit)?;
        // Reservations are charged apart since 5.7; limit them alike, as runc does.
        let rsvd = format!("hugetlb.{}.rsvd.max", h.page_size());
        if scope.join(&rsvd).exists() {
            write_file(scope, &rsvd, &limit)?;
        }
    }
    let mut unified: Vec<_> = r
        .unified()
        .iter()
        .flatten()
        .filter(|(k, _)| !AS_PROPERTIES.contains(&k.as_str()))
        .collect();
    unified.sort();
    for (key, value) in unified {
        write_file(scope, key, value)?;
    }
    Ok(())
}

/// Enables `controller` in the subtree_control of each cgroup from `root` down to `scope`'s
/// parent, so `scope` gets its files. The slices on the way hold no processes, so the kernel's
/// no-internal-processes rule allows it; systemd leaves controllers it does not manage alone.
fn enable_down_to(root: &Path, scope: &Path, controller: &str) -> Result<(), String> {
    let Some(parent) = scope.parent() else {
        return Ok(());
    };
    let below = parent
        .strip_prefix(root)
        .map_err(|_| format!("{} is not below {}", scope.display(), root.display()))?;
    let mut dir = root.to_path_buf();
    for level in std::iter::once(None).chain(below.components().map(Some)) {
        if let Some(c) = level {
            dir.push(c);
        }
        let file = dir.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        if enabled.split_whitespace().any(|c| c == controller) {
            continue;
        }
        write_existing(&file, &format!("+{controller}")).map_err(|e| {
            format!(
                "enabling the {controller} controller in {}: {e}",
                file.display()
            )
        })?;
    }
    Ok(())
}

fn write_file(dir: &Path, name: &str, value: &str) -> Result<(), String> {
    let path = dir.join(name);
    write_existing(&path, value).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "{name}: no such file in {} (is its controller enabled there?)",
            dir.display()
        ),
        _ => format!("writing {value:?} to {}: {e}", path.display()),
    })
}

/// A cgroup file is the kernel's: opened without O_CREAT, so a missing one is ENOENT (O_TRUNC
/// as runc opens them; the kernel ignores it).
fn write_existing(path: &Path, value: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    file.write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxHugepageLimit, LinuxResourcesBuilder};

    /// A fake v2 tree: root, one slice, one scope; subtree_control files as the kernel lists
    /// them (here plain files, so a write replaces instead of adding).
    fn tree(dir: &Path, root_enabled: &str, slice_enabled: &str) -> std::path::PathBuf {
        let scope = dir.join("k.slice/crust-x.scope");
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::write(dir.join("cgroup.subtree_control"), root_enabled).unwrap();
        std::fs::write(dir.join("k.slice/cgroup.subtree_control"), slice_enabled).unwrap();
        std::fs::write(scope.join("hugetlb.2MB.max"), "max").unwrap();
        std::fs::write(scope.join("io.weight"), "default 100").unwrap();
        scope
    }

    fn huge(size: &str, limit: i64) -> LinuxHugepageLimit {
        let mut h = LinuxHugepageLimit::default();
        h.set_page_size(size.into()).set_limit(limit);
        h
    }

    #[test]
    fn hugetlb_is_enabled_where_missing_and_limited_in_the_scope() {
        let tmp = tempfile::tempdir().unwrap();
        let scope = tree(tmp.path(), "cpu memory hugetlb", "cpu memory");
        let r = LinuxResourcesBuilder::default()
            .hugepage_limits(vec![huge("2MB", 4 << 20)])
            .unified(
                [
                    ("io.weight".to_string(), "200".to_string()),
                    ("memory.high".to_string(), "not for files".to_string()),
                ]
                .into_iter()
                .collect::<std::collections::HashMap<_, _>>(),
            )
            .build()
            .unwrap();
        write(tmp.path(), &scope, &r).unwrap();
        let read = |p: &str| std::fs::read_to_string(tmp.path().join(p)).unwrap();
        // Already on at the root: left alone; missing in the slice: added.
        assert_eq!(read("cgroup.subtree_control"), "cpu memory hugetlb");
        assert_eq!(read("k.slice/cgroup.subtree_control"), "+hugetlb");
        assert_eq!(read("k.slice/crust-x.scope/hugetlb.2MB.max"), "4194304");
        assert_eq!(read("k.slice/crust-x.scope/io.weight"), "200");
        // systemd sets memory.high as a property: no file written for it.
        assert!(
            !tmp.path()
                .join("k.slice/crust-x.scope/memory.high")
                .exists()
        );
    }

    #[test]
    fn a_limit_without_its_file_names_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let scope = tree(tmp.path(), "hugetlb", "hugetlb");
        let r = LinuxResourcesBuilder::default()
            .hugepage_limits(vec![huge("1GB", 1 << 30)])
            .build()
            .unwrap();
        let err = write(tmp.path(), &scope, &r).unwrap_err();
        assert!(
            err.starts_with("hugetlb.1GB.max: no such file in "),
            "{err}"
        );
        // Nothing to write: nothing touched, not even subtree_control.
        let none = LinuxResourcesBuilder::default().build().unwrap();
        std::fs::remove_file(tmp.path().join("cgroup.subtree_control")).unwrap();
        write(tmp.path(), &scope, &none).unwrap();
    }
}
