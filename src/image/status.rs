//! ImageStatus and ListImages: finding an image by id, id prefix, tag or digest, and the view
//! of a record the CRI adapters encode.

use serde_json::json;

use super::registry::reference::ImageRef;
use super::store::records::{ImageRecord, Table};
use super::{ImageError, Images};

/// An image as status and list report it.
#[derive(Debug, Clone)]
pub struct ImageView {
    pub record: ImageRecord,
    /// The numeric user the image runs as, when its `User` is numeric.
    pub uid: Option<i64>,
    /// The user name the image runs as, when its `User` is a name.
    pub username: String,
    /// One of its names matches `image.pinned_images`: kubelet's garbage collection keeps it.
    pub pinned: bool,
}

impl ImageView {
    pub fn new(record: ImageRecord, pinned: bool) -> ImageView {
        let (uid, username) = user_of(&record.config.config.user);
        ImageView {
            record,
            uid,
            username,
            pinned,
        }
    }

    /// The `id` CRI reports: `sha256:<config digest>`.
    pub fn id(&self) -> String {
        self.record.id.to_string()
    }

    /// The verbose info: the image config and where its layers are, for debugging.
    pub fn info(&self, images: &Images) -> serde_json::Value {
        let r = &self.record;
        json!({
            "id": r.id,
            "manifest": r.manifest,
            "imageSpec": r.config,
            "layers": r.layers,
            "lowerdirs": images.lowerdirs(r),
            "storedAt": r.stored_at,
        })
    }
}

/// `User` is `uid`, `uid:gid`, `name` or `name:group`; CRI wants the uid or the name.
fn user_of(user: &str) -> (Option<i64>, String) {
    let u = user.split(':').next().unwrap_or_default();
    if u.is_empty() {
        return (None, String::new());
    }
    match u.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, u.to_owned()),
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The record `spec` names in `table` (see [`Images::find`]).
fn find_in(table: &Table, spec: &str) -> Result<Option<ImageRecord>, ImageError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(ImageError::Reference(super::ReferenceError {
            reference: String::new(),
            reason: "empty",
        }));
    }
    // A full id of any algorithm (`sha512:...` too), then a bare sha256 hex.
    if let Ok(id) = spec.parse::<super::Digest>() {
        return Ok(table.get(&id).cloned());
    }
    let bare = spec.strip_prefix("sha256:").unwrap_or(spec);
    if bare.len() == 64 && is_hex(bare) {
        let id: super::Digest = format!("sha256:{bare}").parse().expect("checked hex");
        return Ok(table.get(&id).cloned());
    }
    let parsed = ImageRef::parse(spec);
    if let Ok(r) = &parsed {
        let name = match &r.digest {
            Some(d) => r.digested(d),
            None => r.tagged().unwrap_or_default(),
        };
        if let Some(rec) = table.by_name(&name) {
            return Ok(Some(rec.clone()));
        }
    }
    if is_hex(bare) {
        return match table.by_id_prefix(bare).as_slice() {
            [one] => Ok(Some((*one).clone())),
            [] => Ok(None),
            _ => Err(ImageError::Ambiguous(bare.to_owned())),
        };
    }
    parsed.map(|_| None).map_err(Into::into)
}

impl Images {
    /// Finds the image `spec` names: a full id (`sha256:<hex>` or `<hex>`), a tag or digest
    /// reference (normalised: `busybox` finds `docker.io/library/busybox:latest`), or a unique
    /// id prefix. `Ok(None)` when there is no such image.
    pub fn find(&self, spec: &str) -> Result<Option<ImageRecord>, ImageError> {
        find_in(&self.table(), spec)
    }

    /// ImageStatus: the image, or `None` when it is not stored (not an error, per CRI).
    pub fn status(&self, spec: &str) -> Result<Option<ImageView>, ImageError> {
        Ok(self.find(spec)?.map(|r| self.view(r)))
    }

    /// [`Images::status`] from the records in memory, when no other process changed them (one
    /// `stat`, nothing read): `None` when they must be reloaded first, which blocks.
    pub fn status_if_current(&self, spec: &str) -> Option<Result<Option<ImageView>, ImageError>> {
        let table = self.table_if_current()?;
        Some(find_in(&table, spec).map(|r| r.map(|r| self.view(r))))
    }

    fn view(&self, record: ImageRecord) -> ImageView {
        let pinned = self.pinned.covers(&record);
        ImageView::new(record, pinned)
    }

    /// ListImages: all images, or the one `filter` names; oldest first.
    pub fn list(&self, filter: Option<&str>) -> Result<Vec<ImageView>, ImageError> {
        if let Some(f) = filter.filter(|f| !f.is_empty()) {
            return Ok(self.find(f)?.map(|r| self.view(r)).into_iter().collect());
        }
        let table = self.table();
        let mut out: Vec<ImageView> = table.all().cloned().map(|r| self.view(r)).collect();
        out.sort_by(|a, b| {
            (a.record.stored_at, &a.record.id).cmp(&(b.record.stored_at, &b.record.id))
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_become_uid_or_name() {
        assert_eq!(user_of(""), (None, String::new()));
        assert_eq!(user_of("1002"), (Some(1002), String::new()));
        assert_eq!(user_of("1003:1004"), (Some(1003), String::new()));
        assert_eq!(user_of("www-data"), (None, "www-data".to_owned()));
        assert_eq!(user_of("www-data:1004"), (None, "www-data".to_owned()));
    }
}
