//! Address lookup tables: the treasury's tables of the accounts its payouts touch, and the
//! transactions that create and extend them.
//!
//! A legacy transaction names every account with 32 bytes, so 1,232 bytes hold about 18
//! transfers. A v0 transaction names an account held by a lookup table with one byte, so
//! the same packet holds as many transfers as the account-lock limit allows
//! ([`crate::pack::ACCOUNTS_PER_TX_MAX`]). The treasury owns its tables (it is their
//! authority and pays their rent) and keeps in them the mint, its own token account and
//! its recipients' token accounts; tables are created and extended by *maintenance
//! transactions* that go through the journal like every payment (signed bytes durable
//! before they are sent, one outcome each, resumed after a crash), and a table is known
//! to the payer only once its maintenance transaction landed ([`crate::Journal::lookup_tables`]).
//!
//! A maintenance transaction holds compute-budget instructions and lookup-table
//! instructions naming one table, nothing else ([`maintained_table`] tells them apart from
//! payments); it carries no payout. A table has at most one live maintenance transaction
//! (one per table and round, and the journal refuses a second:
//! [`maintenance_conflicts`]), so the order its transactions were signed in is the order
//! their addresses are in the table.
//!
//! A v0 message names a table's account by its position, and the signature covers the
//! position, not the address: packed against a table that a node describes wrongly, a
//! transfer pays whatever the table really holds there. So the payer never packs against
//! a table as the node describes it without checking it against what the treasury itself
//! put in it ([`TableHistory`], from the journaled maintenance transactions): any
//! difference, a foreign or missing authority or a deactivation is a [`TableRefusal`], and
//! nothing is signed against the table.

use std::collections::{HashMap, HashSet};

use solana_account::Account;
use solana_address_lookup_table_interface::{
    instruction::{create_lookup_table, derive_lookup_table_address, extend_lookup_table},
    state::{AddressLookupTable, LOOKUP_TABLE_META_SIZE},
};
use solana_instruction::Instruction;
use solana_message::{AddressLookupTableAccount, Message};
use solana_sdk::{hash::Hash, pubkey::Pubkey};
use solana_transaction::{Transaction, versioned::VersionedTransaction};

use crate::chain::{Chain, ChainError};
use crate::pack::{COMPUTE_UNIT_LIMIT_MAX, PACKET_DATA_SIZE, serialized_size};

/// Addresses one lookup table holds at most (a v0 message indexes a table with a `u8`).
pub const ADDRESSES_PER_TABLE_MAX: usize = 256;
/// New tables planned in one round: each is named by a distinct recent slot, and only the
/// slots of the `SlotHashes` sysvar (the last 512) are accepted.
pub const TABLES_CREATED_PER_ROUND_MAX: usize = 128;
/// Bytes of a lookup table's account before its addresses (32 bytes each follow).
pub const TABLE_META_SIZE: usize = LOOKUP_TABLE_META_SIZE;
/// The lookup table program.
pub const LOOKUP_TABLE_PROGRAM_ID: Pubkey = solana_address_lookup_table_interface::program::ID;

/// The address of the table `authority` creates with `recent_slot`.
pub fn table_address(authority: &Pubkey, recent_slot: u64) -> Pubkey {
    derive_lookup_table_address(authority, recent_slot).0
}

/// The treasury's usable lookup tables, in the order they were created.
#[derive(Debug, Clone, Default)]
pub struct LookupTables {
    tables: Vec<AddressLookupTableAccount>,
    /// Address → (table, position in it) of its first occurrence.
    index: HashMap<Pubkey, (usize, usize)>,
}

impl LookupTables {
    /// No tables: every transaction is a legacy one.
    pub fn none() -> Self {
        Self::default()
    }

    /// Tables from their accounts: only lookup tables of `authority` that are not being
    /// deactivated are kept (anyone could pass another table's address). The addresses are
    /// taken as the accounts hold them, unchecked: for looking at tables. The payer packs
    /// only against [`Self::verified`] tables.
    pub fn from_accounts(
        authority: &Pubkey,
        found: impl IntoIterator<Item = (Pubkey, Option<Account>)>,
    ) -> Self {
        let mut out = Self::default();
        for (key, account) in found {
            let Some(account) = account else { continue };
            if account.owner != LOOKUP_TABLE_PROGRAM_ID {
                continue;
            }
            let Ok(table) = AddressLookupTable::deserialize(&account.data) else {
                continue;
            };
            if table.meta.authority != Some(*authority) || table.meta.deactivation_slot != u64::MAX
            {
                continue;
            }
            out.push(AddressLookupTableAccount {
                key,
                addresses: table.addresses.to_vec(),
            });
        }
        out
    }

    /// Read the tables `keys` from the chain (see [`Self::from_accounts`]; unchecked).
    pub async fn load(
        chain: &dyn Chain,
        authority: &Pubkey,
        keys: &[Pubkey],
    ) -> Result<Self, ChainError> {
        if keys.is_empty() {
            return Ok(Self::none());
        }
        let accounts = chain.accounts(keys).await?;
        Ok(Self::from_accounts(
            authority,
            keys.iter().copied().zip(accounts),
        ))
    }

    /// The tables of `history`, from their accounts as a node describes them (`accounts[i]`
    /// is the account of `history.tables()[i]`), each checked with [`TableHistory::check`]:
    /// the first table that differs from what the treasury put in it refuses them all.
    pub fn verified(
        authority: &Pubkey,
        history: &TableHistory,
        accounts: &[Option<Account>],
    ) -> Result<Self, TableRefusal> {
        let mut out = Self::default();
        for (at, key) in history.tables().iter().enumerate() {
            let account = accounts.get(at).and_then(Option::as_ref);
            let addresses = history.check(authority, key, account)?;
            out.push(AddressLookupTableAccount {
                key: *key,
                addresses,
            });
        }
        Ok(out)
    }

    fn push(&mut self, table: AddressLookupTableAccount) {
        let at = self.tables.len();
        for (position, address) in table.addresses.iter().enumerate() {
            self.index.entry(*address).or_insert((at, position));
        }
        self.tables.push(table);
    }

    /// True when there is no table.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The tables.
    pub fn tables(&self) -> &[AddressLookupTableAccount] {
        &self.tables
    }

    /// Where a table holds `address`: (table, position), for ordering transfers so that a
    /// transaction's accounts come from few tables.
    pub fn position(&self, address: &Pubkey) -> Option<(usize, usize)> {
        self.index.get(address).copied()
    }

    /// Those of `wanted` that no table holds, without repeats, in their order.
    pub fn missing(&self, wanted: &[Pubkey]) -> Vec<Pubkey> {
        let mut seen = HashSet::new();
        wanted
            .iter()
            .filter(|a| !self.index.contains_key(a) && seen.insert(**a))
            .copied()
            .collect()
    }

    /// The tables that hold any of `keys`, in table order (what a v0 message compiles
    /// against; a table that holds none of them would only cost bytes).
    pub fn covering<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a Pubkey>,
    ) -> Vec<AddressLookupTableAccount> {
        let mut used: Vec<usize> = keys
            .into_iter()
            .filter_map(|k| self.index.get(k).map(|(table, _)| *table))
            .collect();
        used.sort_unstable();
        used.dedup();
        used.into_iter().map(|t| self.tables[t].clone()).collect()
    }

    /// The tables as they are once `work` landed (new tables last, in order).
    fn with_work(&self, work: &[TableWork]) -> Self {
        let mut tables = self.tables.clone();
        for w in work {
            match tables.iter_mut().find(|t| t.key == w.table) {
                Some(t) => t.addresses.extend(w.addresses.iter().copied()),
                None => tables.push(AddressLookupTableAccount {
                    key: w.table,
                    addresses: w.addresses.clone(),
                }),
            }
        }
        let mut out = Self::default();
        for t in tables {
            out.push(t);
        }
        out
    }
}

/// Why the payer does not pack against one of the treasury's lookup tables as a node
/// describes it. [`TableRefusal::code`] is a stable code. Whatever the refusal, nothing is
/// signed against the table and the pass stops (see [`crate::PayError::LookupTable`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableRefusal {
    /// The node's addresses are not the ones the treasury's landed maintenance transactions
    /// appended (followed at most by those of its open ones): at `index` the treasury put
    /// `expected` (`None`: nothing) and the node reports `reported` (`None`: nothing). A
    /// transfer packed against it would pay the account really at that position.
    #[error(
        "lookup_table_mismatch: table {table} index {index}: the treasury put {} there, the \
         node reports {}; nothing is signed against it",
        or_nothing(expected),
        or_nothing(reported)
    )]
    Mismatch {
        /// The table.
        table: Pubkey,
        /// Position of the first difference.
        index: usize,
        /// What the journaled maintenance transactions put there.
        expected: Option<Pubkey>,
        /// What the node says is there.
        reported: Option<Pubkey>,
    },
    /// The node reports no lookup table at the address of a table the treasury created.
    #[error(
        "lookup_table_missing: table {table}: the node reports {found}, not the treasury's \
         lookup table; nothing is signed against it"
    )]
    Missing {
        /// The table.
        table: Pubkey,
        /// What the node reports instead.
        found: String,
    },
    /// The table's authority is another key than the treasury.
    #[error(
        "lookup_table_authority_mismatch: table {table} has authority {authority}, not the \
         treasury; nothing is signed against it"
    )]
    AuthorityMismatch {
        /// The table.
        table: Pubkey,
        /// The authority the node reports.
        authority: Pubkey,
    },
    /// The table is frozen (no authority): the treasury never freezes its tables.
    #[error("lookup_table_frozen: table {table} has no authority; nothing is signed against it")]
    Frozen {
        /// The table.
        table: Pubkey,
    },
    /// The table is being deactivated: the treasury never deactivates its tables.
    #[error(
        "lookup_table_deactivated: table {table} is deactivated since slot {slot}; nothing is \
         signed against it"
    )]
    Deactivated {
        /// The table.
        table: Pubkey,
        /// Its deactivation slot.
        slot: u64,
    },
}

impl TableRefusal {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            TableRefusal::Mismatch { .. } => "lookup_table_mismatch",
            TableRefusal::Missing { .. } => "lookup_table_missing",
            TableRefusal::AuthorityMismatch { .. } => "lookup_table_authority_mismatch",
            TableRefusal::Frozen { .. } => "lookup_table_frozen",
            TableRefusal::Deactivated { .. } => "lookup_table_deactivated",
        }
    }

    /// The table refused.
    pub fn table(&self) -> Pubkey {
        match self {
            TableRefusal::Mismatch { table, .. }
            | TableRefusal::Missing { table, .. }
            | TableRefusal::AuthorityMismatch { table, .. }
            | TableRefusal::Frozen { table }
            | TableRefusal::Deactivated { table, .. } => *table,
        }
    }
}

fn or_nothing(address: &Option<Pubkey>) -> String {
    address.map_or_else(|| "nothing".to_owned(), |a| a.to_string())
}

/// What the treasury put in its lookup tables, from its journal: per table, the addresses
/// its landed maintenance transactions appended, in the order they were signed (the order
/// on chain: a table has one live maintenance transaction at a time), and the addresses of
/// each of its maintenance transactions still open (signed, outcome not known yet: they
/// may have landed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableHistory {
    /// The tables, in the order of their first landed transaction.
    tables: Vec<Pubkey>,
    /// Per table, the addresses its landed transactions appended, in order.
    landed: HashMap<Pubkey, Vec<Pubkey>>,
    /// Per table, the addresses each of its open transactions appends.
    open: HashMap<Pubkey, Vec<Vec<Pubkey>>>,
}

impl TableHistory {
    /// The history of the landed maintenance transactions `landed`, in the order they were
    /// signed, and of the open ones `open` (see [`maintenance_of`]). Only tables with a
    /// landed transaction are known; an open transaction of another table is ignored.
    pub fn new(
        landed: impl IntoIterator<Item = TableWork>,
        open: impl IntoIterator<Item = TableWork>,
    ) -> Self {
        let mut out = Self::default();
        for work in landed {
            match out.landed.get_mut(&work.table) {
                Some(addresses) => addresses.extend(work.addresses),
                None => {
                    out.tables.push(work.table);
                    out.landed.insert(work.table, work.addresses);
                }
            }
        }
        for work in open {
            if out.landed.contains_key(&work.table) && !work.addresses.is_empty() {
                out.open.entry(work.table).or_default().push(work.addresses);
            }
        }
        out
    }

    /// The tables, in the order of their first landed transaction (as
    /// [`crate::Journal::lookup_tables`] lists them).
    pub fn tables(&self) -> &[Pubkey] {
        &self.tables
    }

    /// What `table` holds after the treasury's landed transactions (empty for a table it
    /// does not know).
    pub fn expected(&self, table: &Pubkey) -> &[Pubkey] {
        self.landed.get(table).map_or(&[], Vec::as_slice)
    }

    /// Check `account`, a node's description of the treasury's table `table`, and return
    /// its addresses. It must be a lookup table of `authority` (not frozen, not being
    /// deactivated) whose addresses are exactly [`Self::expected`], followed at most by
    /// those of the table's open transactions (each at most once, whole): anything else is
    /// refused, naming the first position that differs.
    pub fn check(
        &self,
        authority: &Pubkey,
        table: &Pubkey,
        account: Option<&Account>,
    ) -> Result<Vec<Pubkey>, TableRefusal> {
        let table = *table;
        let missing = |found: String| TableRefusal::Missing { table, found };
        let account = account.ok_or_else(|| missing("no account".to_owned()))?;
        if account.owner != LOOKUP_TABLE_PROGRAM_ID {
            return Err(missing(format!("an account of program {}", account.owner)));
        }
        let state = AddressLookupTable::deserialize(&account.data)
            .map_err(|e| missing(format!("an account that is no lookup table ({e})")))?;
        match state.meta.authority {
            None => return Err(TableRefusal::Frozen { table }),
            Some(found) if found != *authority => {
                return Err(TableRefusal::AuthorityMismatch {
                    table,
                    authority: found,
                });
            }
            Some(_) => {}
        }
        if state.meta.deactivation_slot != u64::MAX {
            return Err(TableRefusal::Deactivated {
                table,
                slot: state.meta.deactivation_slot,
            });
        }
        let reported = &state.addresses[..];
        let expected = self.expected(&table);
        let mismatch = |index: usize, expected: Option<Pubkey>| TableRefusal::Mismatch {
            table,
            index,
            expected,
            reported: reported.get(index).copied(),
        };
        let same = common_prefix(expected, reported);
        if same < expected.len() {
            return Err(mismatch(same, expected.get(same).copied()));
        }
        // Beyond what landed: only whole open transactions of this table.
        let mut open: Vec<&[Pubkey]> = self
            .open
            .get(&table)
            .map(|o| o.iter().map(Vec::as_slice).collect())
            .unwrap_or_default();
        let mut at = expected.len();
        while at < reported.len() {
            let rest = &reported[at..];
            match open.iter().position(|chunk| rest.starts_with(chunk)) {
                Some(found) => {
                    at += open[found].len();
                    open.swap_remove(found);
                }
                None => {
                    // Name the open transaction the node began, if any.
                    let closest = open
                        .iter()
                        .map(|chunk| (common_prefix(chunk, rest), *chunk))
                        .filter(|(same, _)| *same > 0)
                        .max_by_key(|(same, _)| *same);
                    return Err(match closest {
                        Some((same, chunk)) => mismatch(at + same, chunk.get(same).copied()),
                        None => mismatch(at, None),
                    });
                }
            }
        }
        Ok(reported.to_vec())
    }
}

/// How many leading addresses `a` and `b` share.
fn common_prefix(a: &[Pubkey], b: &[Pubkey]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What making `missing` loadable costs the treasury: every maintenance transaction of
/// every round [`plan`] would send (nothing failing), the tables it creates and the
/// addresses it appends. The rent is a deposit: [`TABLE_META_SIZE`] bytes per new table
/// and 32 per address, at the chain's rent-exempt rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableGrowth {
    /// Maintenance transactions (each pays one signature and its priority fee).
    pub transactions: usize,
    /// Tables created.
    pub tables_created: usize,
    /// Addresses appended.
    pub addresses: usize,
}

/// The rent `growth` deposits in tables: rent is linear in an account's bytes, so a new
/// table costs the rent of its metadata and each address that of 32 bytes more.
pub async fn rent(chain: &dyn Chain, growth: TableGrowth) -> Result<u64, ChainError> {
    if growth == TableGrowth::default() {
        return Ok(0);
    }
    let per_table = chain
        .minimum_balance_for_rent_exemption(TABLE_META_SIZE)
        .await?;
    let per_address = chain
        .minimum_balance_for_rent_exemption(TABLE_META_SIZE + 32)
        .await?
        .saturating_sub(per_table);
    let total = u128::from(per_table) * growth.tables_created as u128
        + u128::from(per_address) * growth.addresses as u128;
    Ok(u64::try_from(total).unwrap_or(u64::MAX))
}

/// The [`TableGrowth`] of making `missing` loadable from `tables`.
pub fn growth(
    tables: &LookupTables,
    authority: &Pubkey,
    missing: &[Pubkey],
    budget: &[Instruction],
) -> TableGrowth {
    let mut out = TableGrowth::default();
    let mut tables = tables.clone();
    let mut missing = missing.to_vec();
    // Any slot names the simulated tables; each round takes slots the last one did not.
    let mut slot = u64::MAX / 2;
    while !missing.is_empty() {
        let work = plan(&tables, authority, &missing, slot, budget);
        let added: usize = work.iter().map(|w| w.addresses.len()).sum();
        if added == 0 {
            break;
        }
        out.transactions += work.len();
        out.tables_created += work.iter().filter(|w| w.create_slot.is_some()).count();
        out.addresses += added;
        tables = tables.with_work(&work);
        missing = tables.missing(&missing);
        slot -= TABLES_CREATED_PER_ROUND_MAX as u64;
    }
    out
}

/// One maintenance transaction: create a table (when `create_slot` is set) and extend it
/// with `addresses`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableWork {
    /// The table created or extended.
    pub table: Pubkey,
    /// The recent slot that names a new table (`derive_lookup_table_address`).
    pub create_slot: Option<u64>,
    /// The addresses appended.
    pub addresses: Vec<Pubkey>,
}

impl TableWork {
    /// The lookup-table instructions (the treasury is authority and pays the rent).
    pub fn instructions(&self, authority: &Pubkey) -> Vec<Instruction> {
        let mut ixs = Vec::with_capacity(2);
        if let Some(slot) = self.create_slot {
            let (create, table) = create_lookup_table(*authority, *authority, slot);
            debug_assert_eq!(table, self.table);
            ixs.push(create);
        }
        if !self.addresses.is_empty() {
            ixs.push(extend_lookup_table(
                self.table,
                *authority,
                Some(*authority),
                self.addresses.clone(),
            ));
        }
        ixs
    }

    /// Serialized size of the transaction with `budget` instructions in front.
    fn size(&self, authority: &Pubkey, budget: &[Instruction]) -> usize {
        let mut ixs = budget.to_vec();
        ixs.extend(self.instructions(authority));
        let message = Message::new_with_blockhash(&ixs, Some(authority), &Hash::default());
        serialized_size(&VersionedTransaction::from(Transaction::new_unsigned(
            message,
        )))
    }
}

/// The transactions of one round that make `missing` loadable: one per table, so that a
/// table has one live maintenance transaction at a time. First the tables with room, in
/// order: each takes as many of the next addresses as fit in one transaction, and keeps
/// its other free places for those after them, appended in its next rounds. Then as many
/// new tables as the rest needs, named by the recent slots `recent_slot`,
/// `recent_slot - 1`, … (at most [`TABLES_CREATED_PER_ROUND_MAX`]), each created by a
/// transaction that appends what fits in it; their other addresses wait for the next
/// rounds, when those tables exist. Each transaction stays within [`PACKET_DATA_SIZE`]
/// with `budget` (the compute-budget instructions) in front.
pub fn plan(
    tables: &LookupTables,
    authority: &Pubkey,
    missing: &[Pubkey],
    recent_slot: u64,
    budget: &[Instruction],
) -> Vec<TableWork> {
    let mut work = Vec::new();
    let mut rest = missing.iter().copied().peekable();
    for table in &tables.tables {
        let free = ADDRESSES_PER_TABLE_MAX.saturating_sub(table.addresses.len());
        let before = rest.len();
        work.extend(fill(&mut rest, authority, budget, (table.key, None), free));
        // The table's other free places: its next rounds fill them.
        let kept = free.saturating_sub(before - rest.len());
        rest.by_ref().take(kept).for_each(drop);
    }
    // As few new tables as the rest needs: each is created with what fits in its creating
    // transaction and filled by extensions in the next rounds.
    let needed = rest.len().div_ceil(ADDRESSES_PER_TABLE_MAX);
    let existing: HashSet<Pubkey> = tables.tables.iter().map(|t| t.key).collect();
    // Slot 0 is no recent slot of any chain that has produced blocks.
    let new_tables = (0..TABLES_CREATED_PER_ROUND_MAX as u64)
        .filter_map(|i| recent_slot.checked_sub(i))
        .filter(|slot| *slot >= 1)
        .map(|slot| (table_address(authority, slot), Some(slot)))
        .filter(|(table, _)| !existing.contains(table))
        .take(needed);
    for new in new_tables.collect::<Vec<_>>() {
        work.extend(fill(
            &mut rest,
            authority,
            budget,
            new,
            ADDRESSES_PER_TABLE_MAX,
        ));
    }
    work
}

/// The transaction that moves the next addresses of `rest` into `table` (created first
/// when its slot is given): as many as fit in one transaction, up to `free`. `None` when
/// there is nothing to move or no room.
fn fill(
    rest: &mut std::iter::Peekable<impl ExactSizeIterator<Item = Pubkey>>,
    authority: &Pubkey,
    budget: &[Instruction],
    (table, create_slot): (Pubkey, Option<u64>),
    mut free: usize,
) -> Option<TableWork> {
    if rest.peek().is_none() || (free == 0 && create_slot.is_none()) {
        return None;
    }
    let mut tx = TableWork {
        table,
        create_slot,
        addresses: Vec::new(),
    };
    while free > 0
        && let Some(next) = rest.peek()
    {
        tx.addresses.push(*next);
        if tx.size(authority, budget) > PACKET_DATA_SIZE {
            tx.addresses.pop();
            break;
        }
        rest.next();
        free -= 1;
    }
    Some(tx)
}

/// The table a maintenance transaction creates or extends: `Some` when each instruction
/// belongs to the compute-budget or the lookup-table program, at least one to the latter,
/// and all lookup-table instructions name the same table (their first account).
pub fn maintained_table(tx: &VersionedTransaction) -> Option<Pubkey> {
    let keys = tx.message.static_account_keys();
    let budget = solana_compute_budget_interface::ID;
    let mut table = None;
    for ix in tx.message.instructions() {
        let program = keys.get(usize::from(ix.program_id_index))?;
        if *program == budget {
            continue;
        }
        if *program != LOOKUP_TABLE_PROGRAM_ID {
            return None;
        }
        let named = keys.get(usize::from(*ix.accounts.first()?))?;
        match table {
            None => table = Some(*named),
            Some(t) if t == *named => {}
            Some(_) => return None,
        }
    }
    table
}

/// What a maintenance transaction does: the table it names, whether it creates it, and the
/// addresses it appends (`None` when it is no maintenance transaction).
pub fn maintenance_of(tx: &VersionedTransaction) -> Option<TableWork> {
    use solana_address_lookup_table_interface::instruction::ProgramInstruction;
    let table = maintained_table(tx)?;
    let keys = tx.message.static_account_keys();
    let mut work = TableWork {
        table,
        create_slot: None,
        addresses: Vec::new(),
    };
    for ix in tx.message.instructions() {
        if keys.get(usize::from(ix.program_id_index)) != Some(&LOOKUP_TABLE_PROGRAM_ID) {
            continue;
        }
        match bincode::deserialize::<ProgramInstruction>(&ix.data).ok()? {
            ProgramInstruction::CreateLookupTable { recent_slot, .. } => {
                work.create_slot = Some(recent_slot);
            }
            ProgramInstruction::ExtendLookupTable { new_addresses } => {
                work.addresses.extend(new_addresses);
            }
            _ => {}
        }
    }
    Some(work)
}

/// Whether two maintenance transactions may not both be live: they name the same table
/// (its addresses would be in the order the two land, which the signer cannot know, and
/// [`TableHistory`] takes the order they were signed in) or append a common address (two
/// payers that each planned the same accounts). Within one plan the transactions are
/// disjoint.
pub fn maintenance_conflicts(a: &TableWork, b: &TableWork) -> bool {
    let shared: HashSet<&Pubkey> = a.addresses.iter().collect();
    a.table == b.table || b.addresses.iter().any(|address| shared.contains(address))
}

/// [`maintenance_of`] of serialized transaction bytes.
pub fn maintenance_of_bytes(tx_bytes: &[u8]) -> Option<TableWork> {
    let tx: VersionedTransaction = bincode::deserialize(tx_bytes).ok()?;
    maintenance_of(&tx)
}

/// The compute-budget instructions of a maintenance transaction.
pub fn budget_instructions(compute_unit_limit: u32, priority_fee: u64) -> Vec<Instruction> {
    use solana_compute_budget_interface::ComputeBudgetInstruction;
    vec![
        ComputeBudgetInstruction::set_compute_unit_limit(compute_unit_limit),
        ComputeBudgetInstruction::set_compute_unit_price(priority_fee),
    ]
}

/// Budget instructions as sized for planning (the largest limit).
pub fn budget_for_sizing(priority_fee: u64) -> Vec<Instruction> {
    budget_instructions(COMPUTE_UNIT_LIMIT_MAX, priority_fee)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use solana_address_lookup_table_interface::state::LookupTableMeta;

    use super::*;

    fn keys(n: usize) -> Vec<Pubkey> {
        (0..n).map(|_| Pubkey::new_unique()).collect()
    }

    fn table_account(
        authority: Option<Pubkey>,
        deactivation_slot: u64,
        addresses: &[Pubkey],
    ) -> Account {
        let meta = LookupTableMeta {
            authority,
            deactivation_slot,
            ..LookupTableMeta::default()
        };
        let data = AddressLookupTable {
            meta,
            addresses: Cow::Borrowed(addresses),
        }
        .serialize_for_tests()
        .expect("a table serializes");
        Account {
            lamports: 1,
            data,
            owner: LOOKUP_TABLE_PROGRAM_ID,
            executable: false,
            rent_epoch: 0,
        }
    }

    fn work(table: Pubkey, create: bool, addresses: &[Pubkey]) -> TableWork {
        TableWork {
            table,
            create_slot: create.then_some(7),
            addresses: addresses.to_vec(),
        }
    }

    /// A table created with `a` and extended with `b`, both landed; `c` open.
    struct Case {
        authority: Pubkey,
        table: Pubkey,
        a: Vec<Pubkey>,
        b: Vec<Pubkey>,
        c: Vec<Pubkey>,
        history: TableHistory,
    }

    fn case() -> Case {
        let (authority, table) = (Pubkey::new_unique(), Pubkey::new_unique());
        let (a, b, c) = (keys(3), keys(2), keys(2));
        let other = Pubkey::new_unique();
        let history = TableHistory::new(
            [
                work(table, true, &a),
                work(other, true, &keys(1)),
                work(table, false, &b),
            ],
            [
                work(table, false, &c),
                work(Pubkey::new_unique(), true, &keys(1)),
            ],
        );
        Case {
            authority,
            table,
            a,
            b,
            c,
            history,
        }
    }

    impl Case {
        fn check(&self, addresses: &[Pubkey]) -> Result<Vec<Pubkey>, TableRefusal> {
            let account = table_account(Some(self.authority), u64::MAX, addresses);
            self.history
                .check(&self.authority, &self.table, Some(&account))
        }

        fn landed(&self) -> Vec<Pubkey> {
            [self.a.clone(), self.b.clone()].concat()
        }
    }

    fn mismatch(
        table: Pubkey,
        index: usize,
        expected: Option<Pubkey>,
        reported: Option<Pubkey>,
    ) -> Result<Vec<Pubkey>, TableRefusal> {
        Err(TableRefusal::Mismatch {
            table,
            index,
            expected,
            reported,
        })
    }

    #[test]
    fn the_history_lists_the_tables_with_a_landed_transaction_and_their_addresses_in_order() {
        let c = case();
        assert_eq!(c.history.tables().len(), 2);
        assert_eq!(c.history.tables()[0], c.table);
        assert_eq!(c.history.expected(&c.table), &c.landed()[..]);
        assert!(c.history.expected(&Pubkey::new_unique()).is_empty());
    }

    #[test]
    fn a_table_holding_what_landed_and_its_open_extension_passes() {
        let c = case();
        assert_eq!(c.check(&c.landed()), Ok(c.landed()));
        let with_open = [c.landed(), c.c.clone()].concat();
        assert_eq!(c.check(&with_open), Ok(with_open.clone()));
    }

    #[test]
    fn a_changed_address_is_refused_naming_its_position_and_both_addresses() {
        let c = case();
        let attacker = Pubkey::new_unique();
        let mut lie = c.landed();
        lie[3] = attacker;
        assert_eq!(
            c.check(&lie),
            mismatch(c.table, 3, Some(c.b[0]), Some(attacker))
        );
        // Two of the treasury's own addresses swapped: a transfer would pay the other one.
        let mut swapped = c.landed();
        swapped.swap(1, 4);
        assert_eq!(
            c.check(&swapped),
            mismatch(c.table, 1, Some(c.a[1]), Some(c.b[1]))
        );
        // The extensions in another order than they were signed (one live at a time).
        let reordered = [c.b.clone(), c.a.clone()].concat();
        assert_eq!(
            c.check(&reordered),
            mismatch(c.table, 0, Some(c.a[0]), Some(c.b[0]))
        );
    }

    #[test]
    fn fewer_addresses_or_more_than_the_journal_knows_are_refused() {
        let c = case();
        let landed = c.landed();
        assert_eq!(
            c.check(&landed[..4]),
            mismatch(c.table, 4, Some(c.b[1]), None)
        );
        let stranger = Pubkey::new_unique();
        let extra = [landed.clone(), vec![stranger]].concat();
        assert_eq!(c.check(&extra), mismatch(c.table, 5, None, Some(stranger)));
        // The open extension only whole and once.
        let part = [landed.clone(), vec![c.c[0], stranger]].concat();
        assert_eq!(
            c.check(&part),
            mismatch(c.table, 6, Some(c.c[1]), Some(stranger))
        );
        let twice = [landed.clone(), c.c.clone(), c.c.clone()].concat();
        assert_eq!(c.check(&twice), mismatch(c.table, 7, None, Some(c.c[0])));
        // An extension the journal does not hold (here `b`) is no open transaction.
        let history = TableHistory::new([work(c.table, true, &c.a)], []);
        let account = table_account(Some(c.authority), u64::MAX, &landed);
        assert_eq!(
            history.check(&c.authority, &c.table, Some(&account)),
            mismatch(c.table, 3, None, Some(c.b[0]))
        );
    }

    #[test]
    fn a_table_that_is_not_the_treasurys_live_table_is_refused() {
        let c = case();
        let landed = c.landed();
        let code = |account: Option<&Account>| {
            c.history
                .check(&c.authority, &c.table, account)
                .map_err(|e| e.code())
        };
        let stranger = Pubkey::new_unique();
        assert_eq!(
            code(Some(&table_account(Some(stranger), u64::MAX, &landed))),
            Err("lookup_table_authority_mismatch")
        );
        assert_eq!(
            code(Some(&table_account(None, u64::MAX, &landed))),
            Err("lookup_table_frozen")
        );
        assert_eq!(
            code(Some(&table_account(Some(c.authority), 42, &landed))),
            Err("lookup_table_deactivated")
        );
        assert_eq!(code(None), Err("lookup_table_missing"));
        let mut foreign = table_account(Some(c.authority), u64::MAX, &landed);
        foreign.owner = stranger;
        assert_eq!(code(Some(&foreign)), Err("lookup_table_missing"));
        let mut garbage = table_account(Some(c.authority), u64::MAX, &landed);
        garbage.data.truncate(10);
        assert_eq!(code(Some(&garbage)), Err("lookup_table_missing"));
    }

    #[test]
    fn verified_tables_need_every_table_of_the_history() {
        let c = case();
        let other = c.history.tables()[1];
        let fine = table_account(Some(c.authority), u64::MAX, &c.landed());
        let other_account = table_account(Some(c.authority), u64::MAX, c.history.expected(&other));
        let tables = LookupTables::verified(
            &c.authority,
            &c.history,
            &[Some(fine.clone()), Some(other_account)],
        )
        .expect("honest tables pass");
        assert_eq!(tables.tables().len(), 2);
        assert_eq!(tables.position(&c.b[0]), Some((0, 3)));
        // An answer without the second table's account.
        let short = LookupTables::verified(&c.authority, &c.history, &[Some(fine)]);
        assert_eq!(
            short.map(|_| ()).map_err(|e| (e.code(), e.table())),
            Err(("lookup_table_missing", other))
        );
    }

    #[test]
    fn two_transactions_of_one_table_may_not_both_be_live() {
        let table = Pubkey::new_unique();
        let other = Pubkey::new_unique();
        assert!(maintenance_conflicts(
            &work(table, true, &keys(2)),
            &work(table, false, &keys(2))
        ));
        assert!(maintenance_conflicts(
            &work(table, false, &keys(2)),
            &work(table, false, &keys(2))
        ));
        assert!(!maintenance_conflicts(
            &work(table, false, &keys(2)),
            &work(other, false, &keys(2))
        ));
        let shared = keys(1);
        assert!(maintenance_conflicts(
            &work(table, true, &shared),
            &work(other, true, &shared)
        ));
    }

    #[test]
    fn a_round_has_one_transaction_per_table_and_keeps_a_tables_room_for_its_next_rounds() {
        let authority = Pubkey::new_unique();
        let budget = budget_for_sizing(10_000);
        let existing = Pubkey::new_unique();
        let mut tables = LookupTables::none();
        tables.push(AddressLookupTableAccount {
            key: existing,
            addresses: keys(200),
        });
        let missing = keys(100);
        let work = plan(&tables, &authority, &missing, 1_000, &budget);
        let mut named: Vec<Pubkey> = work.iter().map(|w| w.table).collect();
        named.sort_unstable();
        named.dedup();
        assert_eq!(named.len(), work.len(), "one transaction per table");
        assert_eq!(work[0].table, existing);
        assert!(work[0].create_slot.is_none());
        let first = work[0].addresses.len();
        assert!(
            first > 10 && first < 56,
            "{first} addresses in one transaction"
        );
        assert_eq!(&work[0].addresses[..], &missing[..first]);
        // The existing table keeps 56 places for the next 56 addresses: the new table
        // starts after them.
        assert_eq!(work.len(), 2);
        assert_eq!(work[1].create_slot, Some(1_000));
        assert_eq!(work[1].addresses[0], missing[56]);
        for w in &work {
            assert!(w.size(&authority, &budget) <= PACKET_DATA_SIZE);
        }
        // Round after round every address finds its place, each table holding each once.
        let growth = growth(&tables, &authority, &missing, &budget);
        assert_eq!(growth.addresses, 100);
        assert_eq!(growth.tables_created, 1);
    }
}
