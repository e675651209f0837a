//! The in-process half of the store's concurrency rules (see `store/mod.rs`): the record
//! table and the generation it was read at, the store lock (in-process mutex, then the
//! flock), pins of content in use, and one async mutex per blob or layer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};

use super::content::{Generation, StorePaths};
use super::records::{ImageRecord, Table};
use crate::image::digest::Digest;
use crate::image::{ImageError, Images, lock};

/// The content one holder (a container) keeps alive; persisted under `images/holds`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hold {
    pub holder: String,
    pub image: Digest,
    pub keys: Vec<Digest>,
}

impl crate::store::Record for Hold {
    const VERSION: u32 = 1;
}

#[derive(Clone)]
pub struct State {
    pub table: Arc<Table>,
    pub generation: Generation,
}

/// Content that must not be deleted: pinned by pulls in progress (counted) and held by
/// containers (by holder).
#[derive(Default)]
pub struct Pins {
    pub in_flight: HashMap<Digest, usize>,
    pub holds: HashMap<String, Hold>,
    /// Records this crust could not read whose content it cannot name (a hold set aside, by
    /// its file's stem; a newer crust's hold or image record): while any is here, garbage
    /// collection deletes nothing, as it could delete what they keep.
    pub unknown: std::collections::BTreeSet<String>,
}

/// Removes its pins when dropped.
pub struct PinGuard {
    pins: Arc<Mutex<Pins>>,
    keys: Vec<Digest>,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let mut p = lock(&self.pins);
        for k in &self.keys {
            if let Some(n) = p.in_flight.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    p.in_flight.remove(k);
                }
            }
        }
    }
}

/// One async mutex per key, so concurrent pulls of the same blob or layer do the work once:
/// the second waits for the first and then finds the result in the store.
#[derive(Default)]
pub struct KeyedLocks(Mutex<HashMap<Digest, Weak<tokio::sync::Mutex<()>>>>);

impl KeyedLocks {
    pub async fn lock(&self, key: &Digest) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut map = lock(&self.0);
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(key).and_then(Weak::upgrade) {
                Some(m) => m,
                None => {
                    let m = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(key.clone(), Arc::downgrade(&m));
                    m
                }
            }
        };
        m.lock_owned().await
    }
}

impl Images {
    /// The table in memory if no other process changed the records since it was read: one
    /// `stat` of the generation file, no reading of records.
    pub(in crate::image) fn table_if_current(&self) -> Option<Arc<Table>> {
        let current = self.paths.generation();
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        (state.generation == current).then(|| state.table.clone())
    }

    /// The current table, reloaded first if another process changed the records.
    pub(in crate::image) fn table(&self) -> Arc<Table> {
        if let Some(table) = self.table_if_current() {
            return table;
        }
        if let Err(e) = self.reload(false) {
            tracing::warn!(error = %e, "reloading image records");
        }
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .table
            .clone()
    }

    /// Reads every record from disk. Without `wait`, gives up (keeping the old table) when
    /// another process holds the store lock: it bumps the generation again when done. Returns
    /// the records that could not be read.
    pub(in crate::image) fn reload(
        &self,
        wait: bool,
    ) -> Result<Vec<(std::path::PathBuf, crate::store::StoreError)>, ImageError> {
        let _guard = if self.holds_store_lock() {
            None
        } else if wait {
            Some(self.paths.lock(false))
        } else {
            match self.paths.try_lock(false) {
                Ok(Some(l)) => Some(Ok(l)),
                _ => return Ok(Vec::new()),
            }
        };
        let current = self.paths.generation();
        let (records, unreadable) = load_records(&self.paths)?;
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = State {
            table: Arc::new(Table::from_records(records)),
            generation: current,
        };
        Ok(unreadable)
    }

    pub(in crate::image) fn holds_store_lock(&self) -> bool {
        lock(&self.held_lock).is_some()
    }

    /// Takes the store lock for this process's remaining life (for `crust image import`).
    pub fn hold_store_lock(&self) -> Result<(), ImageError> {
        let l = self.paths.lock(true).map_err(|source| ImageError::Io {
            what: "locking",
            path: self.paths.root().to_owned(),
            source,
        })?;
        *lock(&self.held_lock) = Some(l);
        self.reload(true).map(drop)
    }

    /// Runs `f` with the store lock held exclusively and the table current. Blocking.
    pub(in crate::image) fn with_store_lock<T>(
        &self,
        f: impl FnOnce(&Table) -> Result<T, ImageError>,
    ) -> Result<T, ImageError> {
        let _inner = lock(&self.commit_lock);
        let _flock = if self.holds_store_lock() {
            None
        } else {
            Some(self.paths.lock(true).map_err(|source| ImageError::Io {
                what: "locking",
                path: self.paths.root().to_owned(),
                source,
            })?)
        };
        if self.paths.generation()
            != self
                .state
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .generation
        {
            let table = Table::from_records(load_records(&self.paths)?.0);
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            s.table = Arc::new(table);
            s.generation = self.paths.generation();
        }
        let table = self
            .state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .table
            .clone();
        f(&table)
    }

    /// Installs `table` as the new state after its changed records were saved.
    pub(in crate::image) fn publish(&self, table: Table) -> Result<(), ImageError> {
        let generation = self.paths.bump_generation()?;
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = State {
            table: Arc::new(table),
            generation,
        };
        Ok(())
    }

    /// Pins content for a pull in progress so garbage collection leaves it alone.
    pub(in crate::image) fn pin(&self, keys: Vec<Digest>) -> PinGuard {
        let mut p = lock(&self.pins);
        for k in &keys {
            *p.in_flight.entry(k.clone()).or_default() += 1;
        }
        PinGuard {
            pins: self.pins.clone(),
            keys,
        }
    }
}

/// Every image record, and those that could not be read (each logged).
type Loaded = (
    Vec<ImageRecord>,
    Vec<(std::path::PathBuf, crate::store::StoreError)>,
);

fn load_records(paths: &StorePaths) -> Result<Loaded, ImageError> {
    let dir = paths.records_dir();
    let entries = std::fs::read_dir(&dir).map_err(|source| ImageError::Io {
        what: "reading",
        path: dir.clone(),
        source,
    })?;
    let (mut out, mut unreadable) = (Vec::new(), Vec::new());
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json")
            && !e.file_name().to_string_lossy().starts_with('.')
        {
            match crate::store::load::<ImageRecord>(&p) {
                Ok(r) => out.push(r),
                Err(err) => {
                    tracing::warn!(error = %err, "skipping unreadable image record");
                    unreadable.push((p, err));
                }
            }
        }
    }
    Ok((out, unreadable))
}
