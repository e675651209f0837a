//! Mounting an image's layers as an overlayfs: the root filesystem a container runs on.
//!
//! Where the kernel has overlayfs's `lowerdir+` key (Linux 6.8), the new mount API adds one
//! layer per call, so any number of layers mounts: the classic `lowerdir=a:b:c` option must fit
//! in one page (4 KiB), about 40 of crust's layer paths, and images with more layers exist.
//! Older kernels get the classic option string, and a clear error when it would not fit; so do
//! kernels before 6.5, whose overlayfs takes options the legacy way (any key passes fsconfig).
//! Failures carry the kernel's own message (`overlayfs: failed to resolve ...`) where the new
//! API gives one.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::io::Errno;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, fsconfig_create,
    fsconfig_set_string, fsmount, fsopen, move_mount,
};

/// The mount data page: the classic option string must fit in it, with its terminating NUL.
const MOUNT_DATA_MAX: usize = 4095;

/// A writable layer on top of the image: `upperdir` and `workdir` on the same filesystem.
#[derive(Debug, Clone, Copy)]
pub struct Upper<'a> {
    pub upper: &'a Path,
    pub work: &'a Path,
}

/// Why an overlay could not be mounted.
#[derive(Debug, thiserror::Error)]
#[error("mounting the image's layers on {target}: {detail}")]
pub struct OverlayError {
    pub target: PathBuf,
    pub detail: String,
    /// The writable layer's file system has no space or no inodes left.
    pub out_of_room: bool,
}

/// Mounts `lowerdirs` (topmost first, as `ImageUse::lowerdirs` gives them) on `target`,
/// writable through `upper` when given, read-only otherwise (which needs two layers or more).
/// The new mount API where the kernel has `lowerdir+`, else the classic option string.
pub fn mount_overlay(
    lowerdirs: &[PathBuf],
    upper: Option<Upper<'_>>,
    target: &Path,
) -> Result<(), OverlayError> {
    if lowerdirs.is_empty() {
        return Err(failed(target, "the image has no layers".into()));
    }
    match mount_layer_by_layer(lowerdirs, upper, target) {
        Err(Fallback::Classic) => mount_classic(lowerdirs, upper, target)?,
        Err(Fallback::Failed {
            detail,
            out_of_room,
        }) => {
            return Err(OverlayError {
                out_of_room,
                ..failed(target, detail)
            });
        }
        Ok(()) => {}
    }
    match upper {
        Some(u) => refuse_read_only(target, u),
        None => Ok(()),
    }
}

/// overlayfs mounts read-only, saying so only in the kernel log, when it cannot make its work
/// directory (`work/work`: a full disk, no inodes left). The container would then fail much
/// later, with EROFS from some other step, or run with a root it cannot write. Such a mount
/// is undone here and refused, saying why.
fn refuse_read_only(target: &Path, u: Upper<'_>) -> Result<(), OverlayError> {
    use rustix::fs::{StatVfsMountFlags, statvfs};
    let mounted =
        statvfs(target).map_err(|e| failed(target, format!("checking the mount: {e}")))?;
    if !mounted.f_flag.contains(StatVfsMountFlags::RDONLY) {
        return Ok(());
    }
    let _ = crate::durable::umount2(target, nix::mount::MntFlags::MNT_DETACH);
    let out_of_room = statvfs(u.work).is_ok_and(|w| w.f_favail == 0 || w.f_bavail == 0);
    let why = if out_of_room {
        "no space or inodes are left there"
    } else {
        "see the kernel log"
    };
    Err(OverlayError {
        target: target.to_owned(),
        detail: format!(
            "overlayfs could not make its work directory in {} and mounted read-only ({why})",
            u.work.display()
        ),
        out_of_room,
    })
}

enum Fallback {
    /// This kernel lacks the new mount API or `lowerdir+`.
    Classic,
    Failed {
        detail: String,
        out_of_room: bool,
    },
}

impl Fallback {
    fn failed(detail: String, e: Option<Errno>) -> Fallback {
        Fallback::Failed {
            detail,
            out_of_room: matches!(e, Some(Errno::NOSPC | Errno::DQUOT)),
        }
    }
}

fn mount_layer_by_layer(
    lowerdirs: &[PathBuf],
    upper: Option<Upper<'_>>,
    target: &Path,
) -> Result<(), Fallback> {
    let fs = match fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC) {
        Ok(fs) => fs,
        Err(Errno::NOSYS) => return Err(Fallback::Classic),
        Err(e) => return Err(Fallback::failed(format!("opening overlayfs: {e}"), Some(e))),
    };
    // Before Linux 6.5 overlayfs parses its options the legacy way: the kernel takes any key
    // through fsconfig (`lowerdir+` too) and only mounting fails. A key no parser knows tells.
    if fsconfig_set_string(&fs, "crust_probe", "1").is_ok() {
        return Err(Fallback::Classic);
    }
    // The probe's refusal is queued on the context: drop it, so errors show only their own.
    kernel_messages(&fs);
    let set = |key: &str, value: &Path| {
        fsconfig_set_string(&fs, key, value)
            .map_err(|e| explain(&fs, format!("{key} {}", value.display()), e))
    };
    for (i, dir) in lowerdirs.iter().enumerate() {
        if let Err(e) = fsconfig_set_string(&fs, "lowerdir+", dir) {
            // The first layer tells whether the key exists; later ones are real failures.
            if i == 0 && e == Errno::INVAL && !dir.is_dir() {
                let missing = format!("layer {} is missing", dir.display());
                return Err(Fallback::failed(missing, None));
            }
            if i == 0 && e == Errno::INVAL {
                return Err(Fallback::Classic);
            }
            return Err(explain(&fs, format!("layer {}", dir.display()), e));
        }
    }
    if let Some(u) = upper {
        set("upperdir", u.upper)?;
        set("workdir", u.work)?;
    }
    fsconfig_create(&fs).map_err(|e| explain(&fs, "creating the overlay".into(), e))?;
    let attrs = if upper.is_some() {
        MountAttrFlags::empty()
    } else {
        MountAttrFlags::MOUNT_ATTR_RDONLY
    };
    let mnt = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs)
        .map_err(|e| explain(&fs, "mounting".into(), e))?;
    let attached = move_mount(
        mnt.as_fd(),
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    );
    // The overlay appears in the mount table here, not at fsmount.
    crate::durable::step("mount", target.display());
    attached.map_err(|e| Fallback::failed(format!("attaching the mount: {e}"), Some(e)))
}

/// `step` failed with `e`; the kernel's messages on the fs context say why.
fn explain(fs: &OwnedFd, step: String, e: Errno) -> Fallback {
    let said = kernel_messages(fs);
    let detail = if said.is_empty() {
        format!("{step}: {e}")
    } else {
        format!("{step}: {e} ({said})")
    };
    Fallback::failed(detail, Some(e))
}

/// Reads the messages the kernel queued on an fs context (`e overlayfs: ...`), without the
/// level prefix.
fn kernel_messages(fs: &OwnedFd) -> String {
    let mut said = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n) = rustix::io::read(fs, &mut buf) {
        if n == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&buf[..n]);
        said.push(line.get(2..).unwrap_or_default().trim().to_owned());
    }
    said.join("; ")
}

fn mount_classic(
    lowerdirs: &[PathBuf],
    upper: Option<Upper<'_>>,
    target: &Path,
) -> Result<(), OverlayError> {
    let data = classic_options(lowerdirs, upper).map_err(|d| failed(target, d))?;
    let flags = if upper.is_some() {
        nix::mount::MsFlags::empty()
    } else {
        nix::mount::MsFlags::MS_RDONLY
    };
    crate::durable::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        flags,
        Some(data.as_str()),
    )
    .map_err(|e| OverlayError {
        out_of_room: matches!(e, nix::errno::Errno::ENOSPC | nix::errno::Errno::EDQUOT),
        ..failed(target, format!("mount: {e}"))
    })
}

/// `lowerdir=a:b:c[,upperdir=u,workdir=w]`, refused when it does not fit the mount data page.
fn classic_options(lowerdirs: &[PathBuf], upper: Option<Upper<'_>>) -> Result<String, String> {
    let mut dirs = Vec::with_capacity(lowerdirs.len());
    for d in lowerdirs {
        let s = d.to_str().filter(|s| !s.contains([':', ',']));
        dirs.push(s.ok_or_else(|| format!("layer path {} cannot be a mount option", d.display()))?);
    }
    let mut data = format!("lowerdir={}", dirs.join(":"));
    if let Some(u) = upper {
        data.push_str(&format!(
            ",upperdir={},workdir={}",
            u.upper.display(),
            u.work.display()
        ));
    }
    if data.len() > MOUNT_DATA_MAX {
        return Err(format!(
            "{} layers need a {}-byte mount option, over the kernel's {MOUNT_DATA_MAX}; \
             Linux 6.8 or later mounts any number of layers",
            lowerdirs.len(),
            data.len()
        ));
    }
    Ok(data)
}

fn failed(target: &Path, detail: String) -> OverlayError {
    OverlayError {
        target: target.to_owned(),
        detail,
        out_of_room: false,
    }
}

/// The layers (lowerdirs, topmost first) of the overlay mounted at `target`, as the kernel
/// shows them in `mountinfo`: `lowerdir=a:b` (a `\:` escapes a colon in a path), or one
/// `lowerdir+=` per layer. Empty when nothing is mounted there. What recovery reads when a
/// container's image hold is lost and its image gone.
pub fn lowerdirs_of(mountinfo: &str, target: &Path) -> Vec<PathBuf> {
    let target = target.to_string_lossy();
    let Some(line) = mountinfo
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(&*target) && l.contains(" - overlay "))
    else {
        return Vec::new();
    };
    let options = line.rsplit(' ').next().unwrap_or_default();
    let mut out = Vec::new();
    for opt in split_unescaped(options, ',', true) {
        if let Some(list) = opt.strip_prefix("lowerdir=") {
            out.extend(
                split_unescaped(list, ':', false)
                    .into_iter()
                    .map(PathBuf::from),
            );
        } else if let Some(one) = opt.strip_prefix("lowerdir+=") {
            out.extend(
                split_unescaped(one, ',', false)
                    .into_iter()
                    .map(PathBuf::from),
            );
        }
    }
    out
}

/// `text` split at each `sep` that no backslash escapes, the escapes kept (`keep`) or removed.
fn split_unescaped(text: &str, sep: char, keep: bool) -> Vec<String> {
    let (mut parts, mut part, mut chars) = (Vec::new(), String::new(), text.chars());
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if keep {
                    part.push(c);
                }
                part.extend(chars.next());
            }
            c if c == sep => parts.push(std::mem::take(&mut part)),
            c => part.push(c),
        }
    }
    parts.push(part);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` layers with long paths, layer i holding file `i` and `top` saying which is highest;
    /// topmost first.
    fn layers(root: &Path, n: usize) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        for i in 0..n {
            let d = root.join(format!("{i:0>64}")).join("fs");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(i.to_string()), b"").unwrap();
            std::fs::write(d.join("top"), i.to_string()).unwrap();
            dirs.push(d);
        }
        dirs.reverse();
        dirs
    }

    fn require_root() {
        assert!(
            rustix::process::geteuid().is_root(),
            "SKIPPED is not a pass: mounting needs root (make test runs as root)"
        );
    }

    #[test]
    fn mounts_more_layers_than_the_option_page_holds() {
        require_root();
        let t = tempfile::tempdir().unwrap();
        let lower = layers(&t.path().join("layers"), 120);
        assert!(
            classic_options(&lower, None).is_err(),
            "the test must exceed one page"
        );
        let (up, work, merged) = (t.path().join("u"), t.path().join("w"), t.path().join("m"));
        for d in [&up, &work, &merged] {
            std::fs::create_dir(d).unwrap();
        }
        let upper = Upper {
            upper: &up,
            work: &work,
        };
        mount_overlay(&lower, Some(upper), &merged).unwrap();
        let seen = (
            merged.join("0").exists(),
            merged.join("119").exists(),
            std::fs::read_to_string(merged.join("top")).ok(),
            std::fs::write(merged.join("new"), b"w").is_ok(),
        );
        nix::mount::umount2(&merged, nix::mount::MntFlags::MNT_DETACH).unwrap();
        assert_eq!(seen, (true, true, Some("119".into()), true));
        assert!(up.join("new").exists(), "writes land in the upper dir");
    }

    #[test]
    fn read_only_without_an_upper_and_failures_say_why() {
        require_root();
        let t = tempfile::tempdir().unwrap();
        let lower = layers(t.path(), 3);
        let merged = t.path().join("m");
        std::fs::create_dir(&merged).unwrap();
        mount_overlay(&lower, None, &merged).unwrap();
        let write = std::fs::write(merged.join("x"), b"");
        nix::mount::umount2(&merged, nix::mount::MntFlags::MNT_DETACH).unwrap();
        assert!(write.is_err(), "no upper: read-only");

        let mut gone = lower.clone();
        gone.push(t.path().join("no-such-layer"));
        let e = mount_overlay(&gone, None, &merged).unwrap_err().to_string();
        assert!(
            e.contains("no-such-layer") && e.contains(&merged.display().to_string()),
            "{e}"
        );
        let e = mount_overlay(&[], None, &merged).unwrap_err().to_string();
        assert!(e.contains("no layers"), "{e}");
    }

    #[test]
    fn the_classic_option_string_fits_or_is_refused() {
        let dirs = [PathBuf::from("/l/2"), PathBuf::from("/l/1")];
        let upper = Upper {
            upper: Path::new("/u"),
            work: Path::new("/w"),
        };
        assert_eq!(
            classic_options(&dirs, Some(upper)).unwrap(),
            "lowerdir=/l/2:/l/1,upperdir=/u,workdir=/w"
        );
        assert!(classic_options(&[PathBuf::from("/a:b")], None).is_err());
        let many: Vec<_> = (0..50)
            .map(|i| PathBuf::from(format!("/{i:0>90}")))
            .collect();
        let e = classic_options(&many, None).unwrap_err();
        assert!(e.contains("50 layers") && e.contains("6.8"), "{e}");
    }

    #[test]
    fn the_layers_of_a_mounted_overlay_are_read_back_from_mountinfo() {
        let info = "48 27 0:40 / /r/c/rootfs rw,relatime - overlay overlay rw,lowerdir=/l/a:/l/b\\:c,upperdir=/u,workdir=/w,uuid=on\n\
                    49 27 0:41 / /r/d/rootfs rw - overlay overlay rw,lowerdir+=/l/x,lowerdir+=/l/y\n";
        assert_eq!(
            lowerdirs_of(info, Path::new("/r/c/rootfs")),
            [PathBuf::from("/l/a"), PathBuf::from("/l/b:c")]
        );
        assert_eq!(
            lowerdirs_of(info, Path::new("/r/d/rootfs")),
            [PathBuf::from("/l/x"), PathBuf::from("/l/y")]
        );
        assert!(lowerdirs_of(info, Path::new("/r/e/rootfs")).is_empty());
    }
}
