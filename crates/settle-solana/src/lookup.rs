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
//! payments); it carries no payout.

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
    /// deactivated are kept (anyone could pass another table's address).
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

    /// Read the tables `keys` from the chain (see [`Self::from_accounts`]).
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

/// The transactions that make `missing` loadable: first the tables with room, in order,
/// then as many new tables as the rest needs, named by the recent slots `recent_slot`,
/// `recent_slot - 1`, … (at most [`TABLES_CREATED_PER_ROUND_MAX`], one transaction each
/// that creates and extends it; what does not fit waits for the next round, when those
/// tables exist). Each
/// transaction stays within [`PACKET_DATA_SIZE`] with `budget` (the compute-budget
/// instructions) in front.
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
        fill(
            &mut work,
            &mut rest,
            authority,
            budget,
            (table.key, None),
            free,
            false,
        );
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
        // One transaction per new table and round: an extension sent alongside could land
        // before the creation.
        fill(
            &mut work,
            &mut rest,
            authority,
            budget,
            new,
            ADDRESSES_PER_TABLE_MAX,
            true,
        );
    }
    work
}

/// Append to `work` the transactions that move addresses of `rest` into `table` (created
/// first when its slot is given), up to `free` addresses, one transaction when `once`.
fn fill(
    work: &mut Vec<TableWork>,
    rest: &mut std::iter::Peekable<impl ExactSizeIterator<Item = Pubkey>>,
    authority: &Pubkey,
    budget: &[Instruction],
    (table, mut create_slot): (Pubkey, Option<u64>),
    mut free: usize,
    once: bool,
) {
    while (free > 0 || create_slot.is_some()) && rest.peek().is_some() {
        let mut tx = TableWork {
            table,
            create_slot: create_slot.take(),
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
        work.push(tx);
        if once {
            break;
        }
    }
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

/// Whether two maintenance transactions may not both be live: they create the same table
/// or append a common address (two payers that each planned the same accounts). Within
/// one plan the transactions are disjoint.
pub fn maintenance_conflicts(a: &TableWork, b: &TableWork) -> bool {
    let created_twice = a.create_slot.is_some() && b.create_slot.is_some() && a.table == b.table;
    let shared: HashSet<&Pubkey> = a.addresses.iter().collect();
    created_twice || b.addresses.iter().any(|address| shared.contains(address))
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
