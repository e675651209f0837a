//! A container's writable layer as a checkpoint keeps it: `rootfs-diff.tar` (what it added or
//! changed) and `deleted.files` (what it removed from the image), the two files CRI-O and
//! checkpointctl name so.
//!
//! The writable layer is overlayfs's upper directory: a whiteout (a character device 0:0)
//! marks a removed path and is listed as deleted, never archived; an opaque directory (xattr
//! `trusted.overlay.opaque=y`: the container removed the directory and made it again) is
//! archived with what it holds and listed as deleted too, meaning "what the image had here is
//! gone": a restore removes every deleted path before it unpacks the tar. Paths are absolute
//! inside the container (`/etc/motd`), as CRI-O writes them.

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Writes the upper directory `upper` into the tar `out` (created new); returns the deleted
/// paths.
pub fn write(upper: &Path, out: &Path) -> io::Result<Vec<String>> {
    let file = crate::durable::create_new(out)?;
    let mut tar = tar::Builder::new(io::BufWriter::new(file));
    tar.follow_symlinks(false);
    let mut deleted = Vec::new();
    walk(&mut tar, upper, Path::new(""), &mut deleted)?;
    let file = tar
        .into_inner()?
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    Ok(deleted)
}

fn walk<W: io::Write>(
    tar: &mut tar::Builder<W>,
    upper: &Path,
    rel: &Path,
    deleted: &mut Vec<String>,
) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(upper.join(rel))?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = rel.join(entry.file_name());
        let full = upper.join(&path);
        let meta = std::fs::symlink_metadata(&full)?;
        if is_whiteout(&meta) {
            deleted.push(inside(&path));
            continue;
        }
        tar.append_path_with_name(&full, &path)?;
        if meta.is_dir() {
            if is_opaque(&full) {
                deleted.push(inside(&path));
            }
            walk(tar, upper, &path, deleted)?;
        }
    }
    Ok(())
}

fn is_whiteout(meta: &Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

fn is_opaque(dir: &Path) -> bool {
    let mut value = [0u8; 4];
    matches!(
        rustix::fs::lgetxattr(dir, "trusted.overlay.opaque", &mut value),
        Ok(n) if value[..n] == *b"y"
    )
}

fn inside(rel: &Path) -> String {
    format!("/{}", rel.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_archived_and_whiteouts_listed_as_deleted() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "SKIPPED is not a pass: a whiteout (a 0:0 character device) needs root (make test \
             runs as root)"
        );
        let dir = std::env::temp_dir().join(format!("crust-rootfs-diff-{}", std::process::id()));
        let upper = dir.join("upper");
        std::fs::create_dir_all(upper.join("etc/conf.d")).unwrap();
        std::fs::write(upper.join("etc/motd"), "changed").unwrap();
        std::fs::write(upper.join("etc/conf.d/a"), "new").unwrap();
        nix::sys::stat::mknod(
            &upper.join("etc/gone"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        std::os::unix::fs::symlink("/nowhere", upper.join("link")).unwrap();
        let out = dir.join("rootfs-diff.tar");
        let deleted = write(&upper, &out).unwrap();
        assert_eq!(deleted, vec!["/etc/gone".to_owned()]);
        let mut names: Vec<String> = tar::Archive::new(std::fs::File::open(&out).unwrap())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["etc", "etc/conf.d", "etc/conf.d/a", "etc/motd", "link"]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
