//! The checkpoint archive: one tar in containerd's layout, which checkpointctl shows and
//! inspects (it takes an archive without `io.container.manager` in its spec for containerd's):
//!
//! ```text
//! checkpoint/        CRIU's images of the process tree
//! dump.log           CRIU's log of the dump
//! stats-dump         CRIU's figures of the dump
//! spec.dump          the container's OCI config.json
//! config.dump        id, name, image, runtime, times (checkpointctl's ContainerConfig)
//! status             the container's state (containerd's `status` file)
//! rootfs-diff.tar    what the container changed in its image's files
//! deleted.files      what it removed of them (a JSON list; only when it removed any)
//! bind.mounts        the host's bind mounts it had, which a restore must be given again
//! container.log      its CRI log, as it was
//! ```
//!
//! The tar is written under a temporary name beside the asked location, synced, and renamed
//! there: a file at the location is always a whole archive.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::container::ContainerRecord;

/// What goes into one archive besides CRIU's images.
pub struct Contents<'a> {
    pub record: &'a ContainerRecord,
    /// The runtime that ran it, for config.dump ("libcontainer" or the handler's binary).
    pub runtime: &'a str,
    /// The bytes of its OCI config.json.
    pub spec: &'a [u8],
    /// CRIU's images directory (with its dump.log and stats-dump).
    pub images_dir: &'a Path,
    pub rootfs_diff: &'a Path,
    pub deleted: &'a [String],
    pub bind_mounts: &'a [BindMount],
    pub checkpointed_at: i64,
}

/// A bind mount from the host that the dump left outside (CRI-O's `bind.mounts` entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BindMount {
    pub destination: String,
    pub source: String,
}

/// The name of the bind mount list in the archive.
pub const BIND_MOUNTS: &str = "bind.mounts";

/// checkpointctl's `ContainerConfig`, as Podman, CRI-O and containerd write it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigDump<'a> {
    id: &'a str,
    name: &'a str,
    rootfs_image: &'a str,
    rootfs_image_ref: &'a str,
    rootfs_image_name: &'a str,
    runtime: &'a str,
    created_time: String,
    checkpointed_time: String,
    restored_time: &'static str,
    restored: bool,
}

/// containerd's `status` file (Go's field names, as it marshals them).
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Status<'a> {
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    pid: u32,
    reason: &'a str,
    message: &'a str,
}

/// CRIU's files that go to the top of the archive rather than under `checkpoint/`.
const BESIDE_IMAGES: [&str; 2] = [crate::criu::LOG, "stats-dump"];

/// The temporary name the archive for `location` is written under (a dot file beside it).
pub fn temp_path(location: &Path) -> PathBuf {
    let name = location
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    location.with_file_name(format!(
        ".{name}.{}.{}{}",
        std::process::id(),
        crate::clock::now_nanos(),
        crate::store::TEMP_SUFFIX
    ))
}

/// Writes the archive at `temp` (created new, mode 0600: it holds the container's memory).
pub fn write(temp: &Path, c: &Contents) -> io::Result<()> {
    let file = crate::durable::create_new(temp)?;
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let mut tar = tar::Builder::new(io::BufWriter::new(file));
    tar.follow_symlinks(false);
    append_images(&mut tar, c.images_dir)?;
    append_bytes(&mut tar, "spec.dump", c.spec)?;
    append_json(&mut tar, "config.dump", &config_dump(c))?;
    append_json(&mut tar, "status", &status(c.record))?;
    tar.append_path_with_name(c.rootfs_diff, "rootfs-diff.tar")?;
    append_json(&mut tar, BIND_MOUNTS, &c.bind_mounts)?;
    if !c.deleted.is_empty() {
        append_json(&mut tar, "deleted.files", &c.deleted)?;
    }
    if let Some(log) = c.record.log_path.as_deref().filter(|l| l.is_file()) {
        append_growing(&mut tar, log, "container.log")?;
    }
    let mut file = tar
        .into_inner()?
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.flush()?;
    file.sync_all()
}

/// Appends a file that may grow while it is read (the CRI log: the monitor's relay writes it
/// whether the container is frozen or not), as long as it was when opened: `tar`'s own
/// `append_path` fails on a file whose size changes under it.
fn append_growing<W: Write>(tar: &mut tar::Builder<W>, path: &Path, name: &str) -> io::Result<()> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let mut header = tar::Header::new_gnu();
    header.set_metadata(&meta);
    header.set_size(meta.len());
    tar.append_data(&mut header, name, file.take(meta.len()))
}

fn append_images<W: Write>(tar: &mut tar::Builder<W>, dir: &Path) -> io::Result<()> {
    tar.append_dir("checkpoint", dir)?;
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()?;
    names.sort();
    for name in names {
        let full = dir.join(&name);
        let name = name.to_string_lossy();
        if BESIDE_IMAGES.contains(&name.as_ref()) {
            tar.append_path_with_name(&full, name.as_ref())?;
        } else {
            tar.append_path_with_name(&full, format!("checkpoint/{name}"))?;
        }
    }
    Ok(())
}

fn append_json<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    value: &impl Serialize,
) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    append_bytes(tar, name, &bytes)
}

fn append_bytes<W: Write>(tar: &mut tar::Builder<W>, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    header.set_mtime((crate::clock::now_nanos() / 1_000_000_000) as u64);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, name, bytes)
}

fn config_dump<'a>(c: &'a Contents) -> ConfigDump<'a> {
    let r = c.record;
    ConfigDump {
        id: &r.id,
        name: &r.spec.metadata.name,
        rootfs_image: &r.image.id,
        rootfs_image_ref: &r.image.reference,
        rootfs_image_name: &r.image.name,
        runtime: c.runtime,
        created_time: crate::clock::rfc3339_millis(r.created_at),
        checkpointed_time: crate::clock::rfc3339_millis(c.checkpointed_at),
        restored_time: "0001-01-01T00:00:00Z",
        restored: false,
    }
}

fn status(r: &ContainerRecord) -> Status<'_> {
    Status {
        created_at: r.created_at,
        started_at: r.started_at,
        finished_at: 0,
        exit_code: 0,
        pid: r.pid.unwrap_or_default().max(0) as u32,
        reason: "",
        message: "",
    }
}
