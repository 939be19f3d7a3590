//! What the cost balance shows: each member's load against its band
//! ([`MemberLoad`], one group) and a table's balance summed over its groups
//! ([`LoadSummary`]), for status, the page and metrics. Data only.

/// One member's place in the balance: its load against its band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLoad<'a> {
    pub member: &'a str,
    /// The sum of its units' costs (thousandths).
    pub load: u64,
    /// Its share of the load, rounded: for a member isolating a hot unit,
    /// that unit's cost.
    pub share: u64,
    /// The band its load should be in: `lo..=hi`.
    pub lo: u64,
    pub hi: u64,
    /// The hot unit it isolates, if any.
    pub hot: Option<&'a str>,
}

impl MemberLoad<'_> {
    pub fn in_band(&self) -> bool {
        (self.lo..=self.hi).contains(&self.load)
    }
}

/// A table's balance summed over its groups, for status and metrics
/// ([`crate::core::table::MatchingTable::loads`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// Per member, sorted by name.
    pub members: Vec<MemberSummary>,
    /// Hot units, sorted.
    pub hot: Vec<String>,
}

/// One member's load against its share, summed over its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSummary {
    pub member: String,
    /// Thousandths of a cost, as `core::costs` keeps them.
    pub load: u64,
    /// Its share; for a member isolating a hot unit, that unit's cost.
    pub share: u64,
    /// Whether its load is within its band in every group.
    pub in_band: bool,
    /// The hot units it isolates.
    pub hot: Vec<String>,
}

impl LoadSummary {
    /// The busiest member's load against its share: `max load ÷ share`
    /// (1 when every member carries exactly its share; a member isolating
    /// a hot unit has that unit's cost as its share). 0 with no load.
    pub fn imbalance(&self) -> f64 {
        self.members
            .iter()
            .filter(|m| m.share > 0)
            .map(|m| m.load as f64 / m.share as f64)
            .fold(0.0, f64::max)
    }

    /// The least busy member's load against its share. 0 with no member.
    pub fn least(&self) -> f64 {
        self.members
            .iter()
            .filter(|m| m.share > 0)
            .map(|m| m.load as f64 / m.share as f64)
            .reduce(f64::min)
            .unwrap_or(0.0)
    }

    /// Members whose load is outside their band.
    pub fn out_of_band(&self) -> usize {
        self.members.iter().filter(|m| !m.in_band).count()
    }

    /// Adds one group's loads ([`loads`]).
    pub fn add(&mut self, group: &[MemberLoad<'_>]) {
        for l in group {
            match self
                .members
                .binary_search_by(|m| m.member.as_str().cmp(l.member))
            {
                Ok(i) => {
                    let m = &mut self.members[i];
                    m.load += l.load;
                    m.share += l.share;
                    m.in_band &= l.hot.is_some() || l.in_band();
                    m.hot.extend(l.hot.map(str::to_string));
                }
                Err(i) => self.members.insert(
                    i,
                    MemberSummary {
                        member: l.member.to_string(),
                        load: l.load,
                        share: l.share,
                        in_band: l.hot.is_some() || l.in_band(),
                        hot: l.hot.map(str::to_string).into_iter().collect(),
                    },
                ),
            }
            if let Some(u) = l.hot
                && let Err(i) = self.hot.binary_search_by(|h| h.as_str().cmp(u))
            {
                self.hot.insert(i, u.to_string());
            }
        }
    }
}
