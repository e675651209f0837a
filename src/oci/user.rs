//! Who a container's process runs as: the uid, primary gid and supplementary groups resolved
//! from the request's security context (`run_as_username`, `run_as_user`, `run_as_group`,
//! `supplemental_groups` and their policy) or the image's `User`, looked up in the image's own
//! `/etc/passwd` and `/etc/group` (their contents are read by the caller and passed in; an
//! absent file is an empty string).
//!
//! The rules are the ones kubelet and critest expect of a CRI runtime:
//! - `run_as_username` names a passwd entry (uid and gid from it); unknown is an error;
//! - `run_as_user` is a uid; its gid comes from the passwd entry with that uid, else 0;
//! - `run_as_group` overrides the gid, and needs one of the two above;
//! - otherwise the image's `User`: empty is root, `uid` and `name` as above, and
//!   `user:group` where either side is a number (taken as is) or a name (looked up);
//! - with `SupplementalGroupsPolicy::Merge` the groups of `/etc/group` that list the user's
//!   name join the request's `supplemental_groups`; with `Strict` only the request's count;
//! - the primary gid is always the first supplementary group, so `id -G` and
//!   `ContainerStatus.user` show it.

use crate::model::{ResolvedUser, SecurityContext, SupplementalGroupsPolicy};

use super::SpecError;

/// The image's account databases, as text (empty when the image has no such file).
#[derive(Debug, Clone, Copy, Default)]
pub struct AccountFiles<'a> {
    pub passwd: &'a str,
    pub group: &'a str,
}

/// The highest id accepted anywhere: Kubernetes validates ids to 0..=2^31-1, and containerd
/// refuses larger ones in an image's `User`.
const MAX_ID: i64 = i32::MAX as i64;

/// Resolves the user a container runs as. `image_user` is the image config's `User`;
/// `image_name` only names the image in errors.
pub fn resolve_user(
    security: &SecurityContext,
    image_user: &str,
    image_name: &str,
    files: &AccountFiles<'_>,
) -> Result<ResolvedUser, SpecError> {
    let passwd = parse_passwd(files.passwd);
    let groups = parse_group(files.group);
    let primary = primary_identity(security, image_user, image_name, &passwd, &groups)?;
    let gid = match security.run_as_group {
        Some(gid) => checked_id("run_as_group", gid)?,
        None => primary.gid,
    };
    let mut additional = vec![gid];
    if security.supplemental_groups_policy == SupplementalGroupsPolicy::Merge {
        if let Some(name) = &primary.name {
            additional.extend(groups.iter().filter(|g| g.lists(name)).map(|g| g.gid));
        }
    }
    for &extra in &security.supplemental_groups {
        additional.push(checked_id("supplemental_groups", extra)?);
    }
    Ok(ResolvedUser {
        uid: primary.uid,
        gid,
        additional_gids: dedup_keep_order(additional),
        // runc looks the uid up, not the name: the first entry with it.
        home: by_uid_entry(&passwd, primary.uid).map(|e| e.home.clone()),
    })
}

/// The uid and gid before `run_as_group`, and the user name whose image groups count.
struct Identity {
    uid: u32,
    gid: u32,
    name: Option<String>,
}

fn primary_identity(
    security: &SecurityContext,
    image_user: &str,
    image_name: &str,
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<Identity, SpecError> {
    if !security.run_as_username.is_empty() {
        let name = &security.run_as_username;
        let entry = by_name(passwd, name).ok_or_else(|| {
            SpecError::Invalid(format!(
                "run_as_username: user {name:?} is not in /etc/passwd of image {image_name}"
            ))
        })?;
        return Ok(entry.identity());
    }
    if let Some(uid) = security.run_as_user {
        return Ok(by_uid(passwd, checked_id("run_as_user", uid)?));
    }
    if security.run_as_group.is_some() {
        return Err(SpecError::Invalid(
            "run_as_group requires run_as_user or run_as_username".into(),
        ));
    }
    image_identity(image_user.trim(), image_name, passwd, groups)
}

/// The image's `User` field: `""`, `uid`, `name`, `uid:gid`, `name:gid`, `uid:group`,
/// `name:group`.
fn image_identity(
    user: &str,
    image_name: &str,
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<Identity, SpecError> {
    let invalid =
        |why: String| SpecError::Invalid(format!("image {image_name}: its User {user:?} {why}"));
    if user.is_empty() {
        return Ok(by_uid(passwd, 0));
    }
    let (user_part, group_part) = match user.split_once(':') {
        Some((_, g)) if g.contains(':') => return Err(invalid("has more than one ':'".into())),
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let numeric = |part: &str, what: &str| -> Result<Option<u32>, SpecError> {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(None);
        }
        match part.parse::<i64>() {
            Ok(id) if id <= MAX_ID => Ok(Some(id as u32)),
            _ => Err(invalid(format!(
                "has a {what} out of range (0 to {MAX_ID})"
            ))),
        }
    };
    let mut identity = match numeric(user_part, "uid")? {
        // A bare uid takes its gid from passwd; with a group part the uid is taken as is.
        Some(uid) if group_part.is_none() => by_uid(passwd, uid),
        Some(uid) => Identity {
            uid,
            gid: 0,
            name: by_uid_entry(passwd, uid).map(|e| e.name.clone()),
        },
        None => by_name(passwd, user_part)
            .map(PasswdEntry::identity)
            .ok_or_else(|| invalid(format!("names user {user_part:?}, not in /etc/passwd")))?,
    };
    if let Some(group) = group_part {
        identity.gid = match numeric(group, "gid")? {
            Some(gid) => gid,
            None => groups
                .iter()
                .find(|g| g.name == group)
                .map(|g| g.gid)
                .ok_or_else(|| invalid(format!("names group {group:?}, not in /etc/group")))?,
        };
    }
    Ok(identity)
}

fn checked_id(field: &str, id: i64) -> Result<u32, SpecError> {
    if (0..=MAX_ID).contains(&id) {
        Ok(id as u32)
    } else {
        Err(SpecError::Invalid(format!(
            "{field}: {id} is out of range (0 to {MAX_ID})"
        )))
    }
}

fn dedup_keep_order(ids: Vec<u32>) -> Vec<u32> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
}

impl PasswdEntry {
    fn identity(&self) -> Identity {
        Identity {
            uid: self.uid,
            gid: self.gid,
            name: Some(self.name.clone()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupEntry {
    name: String,
    gid: u32,
    members: Vec<String>,
}

impl GroupEntry {
    fn lists(&self, user: &str) -> bool {
        self.members.iter().any(|m| m == user)
    }
}

fn by_name<'p>(passwd: &'p [PasswdEntry], name: &str) -> Option<&'p PasswdEntry> {
    passwd.iter().find(|e| e.name == name)
}

fn by_uid_entry(passwd: &[PasswdEntry], uid: u32) -> Option<&PasswdEntry> {
    passwd.iter().find(|e| e.uid == uid)
}

/// A uid with the gid and name of its passwd entry; a uid the image does not know runs with
/// gid 0 and no image groups.
fn by_uid(passwd: &[PasswdEntry], uid: u32) -> Identity {
    match by_uid_entry(passwd, uid) {
        Some(entry) => entry.identity(),
        None => Identity {
            uid,
            gid: 0,
            name: None,
        },
    }
}

/// `name:password:uid:gid:...` lines; comments and lines that do not parse are skipped, as
/// libc's getpwent does.
fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    records(text)
        .filter_map(|fields| {
            Some(PasswdEntry {
                name: fields.first()?.to_string(),
                uid: fields.get(2)?.parse().ok()?,
                gid: fields.get(3)?.parse().ok()?,
                home: fields.get(5).map(|h| h.to_string()).unwrap_or_default(),
            })
        })
        .collect()
}

/// `name:password:gid:member,member` lines.
fn parse_group(text: &str) -> Vec<GroupEntry> {
    records(text)
        .filter_map(|fields| {
            Some(GroupEntry {
                name: fields.first()?.to_string(),
                gid: fields.get(2)?.parse().ok()?,
                members: fields
                    .get(3)
                    .map(|list| {
                        list.split(',')
                            .map(str::trim)
                            .filter(|m| !m.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

fn records(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split(':').collect::<Vec<_>>())
        .filter(|fields| fields.first().is_some_and(|name| !name.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The busybox stand-in's files (as critest's offline images have them), plus the
    /// `test-image-predefined-group` additions.
    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
# a comment
broken:x:notanumber:1::/:
default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh
";
    const GROUP: &str = "root:x:0:
wheel:x:10:root
www-data:x:33:
staff:x:50:
users:x:100:
nogroup:x:65534:
default-user:x:1000:
group-defined-in-image:x:50000:default-user
two:x:4004: www-data , root
";

    fn files() -> AccountFiles<'static> {
        AccountFiles {
            passwd: PASSWD,
            group: GROUP,
        }
    }

    struct Case {
        name: &'static str,
        image_user: &'static str,
        username: &'static str,
        uid: Option<i64>,
        gid: Option<i64>,
        extra: &'static [i64],
        strict: bool,
        want: Result<(u32, u32, &'static [u32]), &'static str>,
    }

    const BASE: Case = Case {
        name: "",
        image_user: "",
        username: "",
        uid: None,
        gid: None,
        extra: &[],
        strict: false,
        want: Ok((0, 0, &[0])),
    };

    #[test]
    fn resolves_users_and_groups() {
        let cases = [
            Case {
                name: "empty image user is root with root's image groups",
                want: Ok((0, 0, &[0, 10, 4004])),
                ..BASE
            },
            Case {
                name: "critest SupplementalGroups on the default image",
                extra: &[1234, 5678],
                want: Ok((0, 0, &[0, 10, 4004, 1234, 5678])),
                ..BASE
            },
            Case {
                name: "critest RunAsUser: a uid not in passwd gets gid 0",
                uid: Some(1001),
                want: Ok((1001, 0, &[0])),
                ..BASE
            },
            Case {
                name: "critest RunAsUserName nobody",
                username: "nobody",
                want: Ok((65534, 65534, &[65534])),
                ..BASE
            },
            Case {
                name: "critest RunAsGroup overrides the gid",
                uid: Some(1001),
                gid: Some(1002),
                want: Ok((1001, 1002, &[1002])),
                ..BASE
            },
            Case {
                name: "critest run_as_group without a user",
                gid: Some(1002),
                want: Err("run_as_group requires run_as_user or run_as_username"),
                ..BASE
            },
            Case {
                name: "critest SupplementalGroupsPolicy Merge",
                image_user: "1000",
                uid: Some(1000),
                extra: &[1234],
                want: Ok((1000, 1000, &[1000, 50000, 1234])),
                ..BASE
            },
            Case {
                name: "critest SupplementalGroupsPolicy Strict",
                image_user: "1000",
                uid: Some(1000),
                extra: &[1234],
                strict: true,
                want: Ok((1000, 1000, &[1000, 1234])),
                ..BASE
            },
            Case {
                name: "run_as_username wins over run_as_user",
                username: "www-data",
                uid: Some(7),
                want: Ok((33, 33, &[33, 4004])),
                ..BASE
            },
            Case {
                name: "unknown run_as_username",
                username: "ghost",
                want: Err("run_as_username: user \"ghost\" is not in /etc/passwd of image img:1"),
                ..BASE
            },
            Case {
                name: "image uid",
                image_user: "1002",
                want: Ok((1002, 0, &[0])),
                ..BASE
            },
            Case {
                name: "image name",
                image_user: "www-data",
                want: Ok((33, 33, &[33, 4004])),
                ..BASE
            },
            Case {
                name: "image uid:gid taken as is",
                image_user: "1003:1004",
                want: Ok((1003, 1004, &[1004])),
                ..BASE
            },
            Case {
                name: "image name:gid",
                image_user: "www-data:1004",
                want: Ok((33, 1004, &[1004, 4004])),
                ..BASE
            },
            Case {
                name: "image uid:group name",
                image_user: "1000:staff",
                want: Ok((1000, 50, &[50, 50000])),
                ..BASE
            },
            Case {
                name: "image name:group name",
                image_user: "daemon:users",
                want: Ok((1, 100, &[100])),
                ..BASE
            },
            Case {
                name: "unknown image user",
                image_user: "ghost",
                want: Err(
                    "image img:1: its User \"ghost\" names user \"ghost\", not in /etc/passwd",
                ),
                ..BASE
            },
            Case {
                name: "unknown image group",
                image_user: "root:ghosts",
                want: Err(
                    "image img:1: its User \"root:ghosts\" names group \"ghosts\", not in /etc/group",
                ),
                ..BASE
            },
            Case {
                name: "too many colons",
                image_user: "a:b:c",
                want: Err("image img:1: its User \"a:b:c\" has more than one ':'"),
                ..BASE
            },
            Case {
                name: "uid out of range in the image",
                image_user: "99999999999",
                want: Err(
                    "image img:1: its User \"99999999999\" has a uid out of range (0 to 2147483647)",
                ),
                ..BASE
            },
            Case {
                name: "negative run_as_user",
                uid: Some(-1),
                want: Err("run_as_user: -1 is out of range (0 to 2147483647)"),
                ..BASE
            },
            Case {
                name: "negative supplemental group",
                extra: &[-5],
                want: Err("supplemental_groups: -5 is out of range (0 to 2147483647)"),
                ..BASE
            },
            Case {
                name: "request group equal to the primary is not repeated",
                uid: Some(33),
                extra: &[33, 4004],
                want: Ok((33, 33, &[33, 4004])),
                ..BASE
            },
        ];
        for case in cases {
            let security = SecurityContext {
                run_as_username: case.username.into(),
                run_as_user: case.uid,
                run_as_group: case.gid,
                supplemental_groups: case.extra.to_vec(),
                supplemental_groups_policy: if case.strict {
                    SupplementalGroupsPolicy::Strict
                } else {
                    SupplementalGroupsPolicy::Merge
                },
                ..Default::default()
            };
            let got = resolve_user(&security, case.image_user, "img:1", &files());
            match (got, case.want) {
                (Ok(user), Ok((uid, gid, groups))) => assert_eq!(
                    (user.uid, user.gid, user.additional_gids.as_slice()),
                    (uid, gid, groups),
                    "{}",
                    case.name
                ),
                (Err(err), Err(want)) => {
                    assert!(matches!(err, SpecError::Invalid(_)), "{}", case.name);
                    assert_eq!(err.to_string(), want, "{}", case.name);
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
            }
        }
    }

    #[test]
    fn missing_files_still_resolve_numeric_users() {
        let empty = AccountFiles::default();
        let security = SecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        };
        let user = resolve_user(&security, "", "img", &empty).unwrap();
        assert_eq!(
            (user.uid, user.gid, user.additional_gids),
            (1000, 0, vec![0])
        );
        assert_eq!(user.home, None, "HOME falls back to / later");
        let root = resolve_user(&SecurityContext::default(), "", "img", &empty).unwrap();
        assert_eq!((root.uid, root.gid, root.additional_gids), (0, 0, vec![0]));
        let named = resolve_user(&SecurityContext::default(), "root", "img", &empty);
        assert!(named.is_err());
    }

    #[test]
    fn the_home_is_the_first_passwd_entry_of_the_uid() {
        let by = |image_user: &str, run_as_user: Option<i64>| {
            let security = SecurityContext {
                run_as_user,
                ..Default::default()
            };
            resolve_user(&security, image_user, "img", &files())
                .unwrap()
                .home
        };
        assert_eq!(by("", None).as_deref(), Some("/root"));
        assert_eq!(
            by("default-user", None).as_deref(),
            Some("/home/default-user")
        );
        assert_eq!(by("", Some(33)).as_deref(), Some("/var/www"));
        assert_eq!(by("4242", None), None);
    }

    #[test]
    fn parses_lenient_account_files() {
        let passwd = parse_passwd(PASSWD);
        assert!(passwd.iter().all(|e| e.name != "broken"));
        assert_eq!(by_name(&passwd, "nobody").map(|e| e.uid), Some(65534));
        let groups = parse_group(GROUP);
        let two = groups.iter().find(|g| g.name == "two").unwrap();
        assert_eq!(two.members, vec!["www-data", "root"]);
        assert!(parse_group("::\n:x:5:\nx:x:\n").is_empty());
    }
}
