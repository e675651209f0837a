//! The two answers of kubelet's relist (ListPodSandbox, ListContainers), with each object kept
//! encoded between its changes.
//!
//! kubelet relists every pod and container every second (every few minutes with Evented PLEG).
//! Between two relists almost nothing changes, yet building the answers anew made a new string
//! of every id, label and annotation of every object, then encoded and freed them all: on a
//! node of 110 pods of 3 containers most of the daemon's time in a relist went to the
//! allocator, copies and protobuf encoding. Records are replaced whole when they change (copy
//! on write), so a record's `Arc` is one version of it: `Memo` keeps each object's bytes with
//! the version they were made from, and a relist copies bytes for the objects that did not
//! change.
//!
//! An unfiltered list (kubelet's relist asks for everything) is also kept whole, as one piece
//! of bytes, with the table's count of changes it was made at: while no record changed, a
//! relist is that count's read and one pointer's copy, not a walk of every record. The kept
//! objects' bytes are pieces of that one buffer, so it costs no second copy.
//!
//! The answer types stand in for the generated ones (`build.rs` maps them with
//! `extern_path`): on the wire they are the same messages, and a client decodes them into
//! their `items` / `containers` as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{DecodeContext, WireType, message};
use prost::{DecodeError, Message};

use super::pb;

/// The field number of the list in both answers (`items = 1`, `containers = 1`).
const LIST_FIELD: u32 = 1;

/// Each object's encoding as an element of its list answer (field key, length, message), with
/// the version of its record it was made from.
pub struct Memo<R> {
    by_id: Mutex<HashMap<String, (Arc<R>, Bytes)>>,
    /// The unfiltered answer, and the count of changes it was made at.
    whole: Mutex<Option<(u64, Bytes)>>,
}

impl<R> Default for Memo<R> {
    fn default() -> Self {
        Memo {
            by_id: Mutex::default(),
            whole: Mutex::default(),
        }
    }
}

impl<R> Memo<R> {
    /// The unfiltered answer's elements: the kept answer while the table's count of changes is
    /// still `changes` (read before listing), else `list`ed and encoded as `encode` does.
    pub fn unfiltered<T, M: Message>(
        &self,
        changes: u64,
        list: impl FnOnce() -> Vec<T>,
        record: impl Fn(&T) -> (&str, &Arc<R>),
        convert: impl Fn(&T) -> M,
    ) -> Vec<Bytes> {
        if let Some((at, kept)) = &*self.whole.lock().unwrap_or_else(|e| e.into_inner()) {
            if *at == changes {
                return vec![kept.clone()];
            }
        }
        let items = list();
        let elements = self.encode(&items, &record, convert);
        let mut all = BytesMut::with_capacity(elements.iter().map(Bytes::len).sum());
        for e in &elements {
            all.extend_from_slice(e);
        }
        let all = all.freeze();
        self.share(&items, &record, &all);
        *self.whole.lock().unwrap_or_else(|e| e.into_inner()) = Some((changes, all.clone()));
        vec![all]
    }

    /// Points each kept object's bytes into `all` (their concatenation, in the order of
    /// `items`), so that the pieces they were copied from are freed.
    fn share<T>(&self, items: &[T], record: impl Fn(&T) -> (&str, &Arc<R>), all: &Bytes) {
        let mut memo = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let mut at = 0;
        for item in items {
            let (id, current) = record(item);
            let Some((kept, bytes)) = memo.get_mut(id) else {
                return;
            };
            let end = at + bytes.len();
            // Another list may have replaced it meanwhile (its record changed): left as it is.
            if !Arc::ptr_eq(kept, current) || end > all.len() {
                return;
            }
            *bytes = all.slice(at..end);
            at = end;
        }
    }

    /// The encoded elements for `items` in their order: kept bytes where an item's record is the
    /// version they were made from, `convert` and encode otherwise.
    pub fn encode<T, M: Message>(
        &self,
        items: &[T],
        record: impl Fn(&T) -> (&str, &Arc<R>),
        convert: impl Fn(&T) -> M,
    ) -> Vec<Bytes> {
        let mut memo = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        // A version held by nobody else was replaced or removed from its table: what a later
        // list needs is the one that replaced it, or nothing.
        memo.retain(|_, (r, _)| Arc::strong_count(r) > 1);
        items
            .iter()
            .map(|item| {
                let (id, current) = record(item);
                match memo.get(id) {
                    Some((kept, bytes)) if Arc::ptr_eq(kept, current) => bytes.clone(),
                    _ => {
                        let bytes = element(&convert(item));
                        memo.insert(id.to_owned(), (current.clone(), bytes.clone()));
                        bytes
                    }
                }
            })
            .collect()
    }

    /// How many objects have bytes kept (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.lock().unwrap().len()
    }
}

/// `m` encoded as one element of a list answer's field.
fn element(m: &impl Message) -> Bytes {
    let mut buf = BytesMut::with_capacity(message::encoded_len(LIST_FIELD, m));
    message::encode(LIST_FIELD, m, &mut buf);
    buf.freeze()
}

/// A list answer: the objects a client decoded, and the elements a server sends already
/// encoded (after the decoded ones, which a server leaves empty).
macro_rules! list_answer {
    ($name:ident, $field:ident, $item:ty) => {
        #[derive(Clone, Default, PartialEq)]
        pub struct $name {
            pub $field: Vec<$item>,
            encoded: Vec<Bytes>,
        }

        impl $name {
            /// An answer of elements encoded already (`Memo::encode`).
            pub fn encoded(encoded: Vec<Bytes>) -> Self {
                $name {
                    $field: Vec::new(),
                    encoded,
                }
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field(stringify!($field), &self.$field)
                    .field("encoded", &self.encoded.len())
                    .finish()
            }
        }

        impl Message for $name {
            fn encode_raw(&self, buf: &mut impl BufMut) {
                for m in &self.$field {
                    message::encode(LIST_FIELD, m, buf);
                }
                for e in &self.encoded {
                    buf.put_slice(e);
                }
            }

            fn merge_field(
                &mut self,
                tag: u32,
                wire_type: WireType,
                buf: &mut impl Buf,
                ctx: DecodeContext,
            ) -> Result<(), DecodeError> {
                if tag == LIST_FIELD {
                    message::merge_repeated(wire_type, &mut self.$field, buf, ctx).map_err(
                        |mut e| {
                            e.push(stringify!($name), stringify!($field));
                            e
                        },
                    )
                } else {
                    prost::encoding::skip_field(wire_type, tag, buf, ctx)
                }
            }

            fn encoded_len(&self) -> usize {
                message::encoded_len_repeated(LIST_FIELD, &self.$field)
                    + self.encoded.iter().map(Bytes::len).sum::<usize>()
            }

            fn clear(&mut self) {
                self.$field.clear();
                self.encoded.clear();
            }
        }
    };
}

list_answer!(ListPodSandboxResponse, items, pb::PodSandbox);
list_answer!(ListContainersResponse, containers, pb::Container);

#[cfg(test)]
mod tests {
    use super::*;

    struct Record {
        id: String,
        running: bool,
    }

    fn container(r: &Arc<Record>) -> pb::Container {
        pb::Container {
            id: r.id.clone(),
            state: if r.running { 1 } else { 2 },
            labels: [("app".to_owned(), r.id.repeat(3))].into(),
            ..Default::default()
        }
    }

    fn record(id: &str, running: bool) -> Arc<Record> {
        Arc::new(Record {
            id: id.to_owned(),
            running,
        })
    }

    fn list(memo: &Memo<Record>, table: &[Arc<Record>]) -> Vec<pb::Container> {
        decoded(memo.encode(table, |r| (r.id.as_str(), r), container))
    }

    /// What a client decodes of an answer made of `elements`.
    fn decoded(elements: Vec<Bytes>) -> Vec<pb::Container> {
        let answer = ListContainersResponse::encoded(elements);
        ListContainersResponse::decode(answer.encode_to_vec().as_slice())
            .unwrap()
            .containers
    }

    #[test]
    fn an_encoded_answer_decodes_to_the_objects_in_their_order() {
        let memo = Memo::default();
        let table = vec![record("b", true), record("a", false), record("c", true)];
        let want: Vec<_> = table.iter().map(container).collect();
        assert_eq!(list(&memo, &table), want);
        // The second time every element comes from the memo: the same answer.
        assert_eq!(list(&memo, &table), want);
    }

    #[test]
    fn a_replaced_record_is_encoded_anew_and_a_removed_one_forgotten() {
        let memo = Memo::default();
        let mut table = vec![record("a", true), record("b", true)];
        list(&memo, &table);
        table[0] = record("a", false);
        let listed = list(&memo, &table);
        assert_eq!(listed[0].state, 2, "the exited container's new state");
        assert_eq!(memo.len(), 2);
        table.pop();
        assert_eq!(list(&memo, &table).len(), 1);
        assert_eq!(memo.len(), 1, "the removed container's bytes are let go");
    }

    fn unfiltered(memo: &Memo<Record>, changes: u64, table: &[Arc<Record>]) -> Vec<pb::Container> {
        decoded(memo.unfiltered(
            changes,
            || table.to_vec(),
            |r| (r.id.as_str(), r),
            container,
        ))
    }

    #[test]
    fn the_unfiltered_answer_is_kept_until_the_count_of_changes_moves() {
        let memo = Memo::default();
        let mut table = vec![record("a", true), record("b", true)];
        let want: Vec<_> = table.iter().map(container).collect();
        assert_eq!(unfiltered(&memo, 1, &table), want);
        // Same count: the kept answer, whatever the table says (the count is what tells).
        table[0] = record("a", false);
        assert_eq!(unfiltered(&memo, 1, &table), want);
        // A change counted: listed again, the changed object encoded anew.
        let want: Vec<_> = table.iter().map(container).collect();
        assert_eq!(unfiltered(&memo, 2, &table), want);
        assert_eq!(want[0].state, 2);
        // The objects' kept bytes are pieces of the whole answer, and still serve a filtered
        // list.
        assert_eq!(list(&memo, &table[1..]), want[1..]);
        table.pop();
        assert_eq!(unfiltered(&memo, 3, &table), want[..1]);
    }

    #[test]
    fn decoded_and_encoded_answers_are_the_same_bytes() {
        let r = record("x", true);
        let decoded = ListContainersResponse {
            containers: vec![container(&r)],
            ..Default::default()
        };
        let memo = Memo::default();
        let encoded = ListContainersResponse::encoded(memo.encode(
            std::slice::from_ref(&r),
            |r| (r.id.as_str(), r),
            container,
        ));
        assert_eq!(decoded.encode_to_vec(), encoded.encode_to_vec());
        assert_eq!(decoded.encoded_len(), encoded.encoded_len());
    }
}
