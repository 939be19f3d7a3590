//! A standby's view ahead of a holding ([`WarmView`]), prepared through the
//! same guards a holder cycle reads through; it decides and writes nothing,
//! and whatever it holds is checked again before a holder uses it.

use std::sync::Arc;

use super::lists::assemble;
use super::solve::{SolveSettings, desired};
use super::{CycleError, HolderView};
use crate::core::liveness::Liveness;
use crate::core::table::MatchingTable;
use crate::edge::redis::Store;
use crate::ops::metrics::Metrics;

/// A standby's view ahead of a holding: the lists read through the same
/// guards a holder cycle reads them through, the members' reports, the
/// liveness and suspects the holder left, and (ring mode without a move
/// limit) the solve, memoised. Its first cycle as a holder starts from the
/// lists and the memo ([`HolderView::warm_from`]): when nothing changed
/// since, it reads no list and does not solve; when anything did, the list
/// versions and the memo's key say so, and it reads and solves as it would
/// have. It decides nothing and writes nothing.
///
/// ```text
///   standby   prepare ── poll ── prepare ── poll ── …   (reads what changed)
///   lease     ─────────────────────────────────▶ acquired
///   holder                                       first cycle: lists known,
///                                                memo hit, no solve
/// ```
pub(in crate::coordinator) struct WarmView {
    pub(super) view: HolderView,
    /// The table generation this replica had seen when the liveness was
    /// loaded: loaded again when it moves.
    generation: Option<u64>,
    /// Whether the last preparation read a list in full.
    pub(in crate::coordinator) read_lists: bool,
    /// The stored table as this replica last verified it (its digest, from
    /// its content, was `{T}:meta`'s), known to the store: a first cycle
    /// that reads the same rows takes its digest instead of hashing them.
    table: Option<Arc<MatchingTable>>,
}

/// What a standby needs to keep a [`WarmView`].
pub(in crate::coordinator) struct Preparer {
    pub(in crate::coordinator) store: Store,
    pub(in crate::coordinator) metrics: Arc<Metrics>,
    pub(in crate::coordinator) services: Vec<String>,
    pub(in crate::coordinator) units_key: String,
    pub(in crate::coordinator) failure_threshold: u32,
    pub(in crate::coordinator) solve: SolveSettings,
}

impl Preparer {
    /// Brings `warm` up to date: reads the lists and reports that changed
    /// (nothing when none did); when any did, or the table's generation
    /// moved since (`generation`, as this replica last saw it), loads the
    /// liveness again and solves if the memo's key changed.
    pub(in crate::coordinator) async fn prepare(
        &self,
        warm: Option<WarmView>,
        generation: u64,
    ) -> Result<WarmView, CycleError> {
        let WarmView {
            mut view,
            generation: loaded_at,
            table,
            ..
        } = warm.unwrap_or_else(|| WarmView {
            view: HolderView::empty(self.failure_threshold),
            generation: None,
            read_lists: false,
            table: None,
        });
        // The table moves with the generation (an edit that does not is
        // caught by the first cycle's digest check).
        let table = if loaded_at == Some(generation) && table.is_some() {
            table
        } else {
            self.table(table).await
        };
        let held = view
            .lists
            .as_ref()
            .map(|c| c.held(&self.units_key))
            .unwrap_or_default();
        let (groups, units) = self
            .store
            .read_lists_since(&self.services, &self.units_key, &held)
            .await
            .map_err(CycleError::Read)?;
        let read_lists = groups.iter().chain([&units]).any(|l| l.entries.is_some());
        let lists_changed = view.lists.is_none() || read_lists;
        let cache = assemble(view.lists.take(), groups, units).await?;
        let inputs = Arc::clone(&cache.inputs);
        view.lists = Some(cache);
        let reports = self
            .store
            .read_reports_since(view.handoff.reports_version)
            .await;
        let reports_changed = reports.content.is_some();
        // A failed read is read again next time (no version is kept).
        let _ = view.handoff.observe(reports, self.store.keys());
        if !lists_changed && !reports_changed && loaded_at == Some(generation) {
            return Ok(WarmView {
                view,
                generation: loaded_at,
                read_lists,
                table,
            });
        }
        let (liveness, suspects) = self.store.read_liveness().await.map_err(CycleError::Read)?;
        // Unreadable entries are the holder's to log.
        (view.liveness, _) = Liveness::restore(self.failure_threshold, liveness);
        view.suspects = suspects;
        // Controls that keep units read the current table too.
        if !self.solve.uses_current() && !view.handoff.controls.keeps_units() {
            let none = Arc::new(MatchingTable::default());
            let (_, solved) = desired(self.solve, &inputs, &mut view, &none).await;
            if solved {
                self.metrics.solve("ahead");
            }
        }
        self.metrics.warm_generation.set(generation);
        Ok(WarmView {
            view,
            generation: Some(generation),
            read_lists,
            table,
        })
    }

    /// The stored table, verified against `{T}:meta`'s digest through the
    /// table guard (read only when the guard cannot tell it is unchanged
    /// since `kept` was verified); `None` when there is none, it is not
    /// intact, or it cannot be read now (a first cycle then reads it).
    async fn table(&self, kept: Option<Arc<MatchingTable>>) -> Option<Arc<MatchingTable>> {
        let meta = match self.store.read_table_state().await {
            Ok((Some(_), _, Some(read))) => return Some(self.known(read)),
            Ok((Some(meta), _, None)) => meta,
            Ok((None, _, _)) | Err(_) => return None,
        };
        if let Some(t) = kept.filter(|t| t.digest() == meta) {
            return Some(t);
        }
        // Known intact, but not by this view (or where Redis does not
        // permit WATCH): read and checked here.
        let read = self.store.read_table().await.ok()?;
        (read.digest() == meta).then(|| self.known(read))
    }

    fn known(&self, table: MatchingTable) -> Arc<MatchingTable> {
        let table = Arc::new(table);
        self.store.knows_table(Arc::clone(&table));
        table
    }
}
