//! Which cluster the payer talks to, and which mint it may pay in there.
//!
//! # Policy
//!
//! - `mainnet-beta` and `devnet` have a USDC mint built in ([`Cluster::usdc_mint`]); any
//!   other mint is refused ([`ClusterError::MintNotAllowed`], `mint_not_allowed`) unless
//!   it is listed in an explicit allow list.
//! - `testnet` has no USDC of Circle's: every mint must be listed.
//! - `localnet` (a local validator, litesvm in tests and the demo) accepts any mint.
//! - Whatever the cluster, the node must be that cluster: its genesis hash is compared
//!   with the public clusters' ([`check_cluster`], `cluster_mismatch`). A node of a public
//!   cluster is never accepted as `localnet`, so naming the cluster `localnet` cannot
//!   unpin the mint of mainnet-beta.
//!
//! The mint must also exist on chain as an SPL Token mint of 6 decimals
//! ([`crate::check_mint`]), on every cluster.

use std::str::FromStr;

use solana_sdk::{hash::Hash, pubkey::Pubkey};

use crate::chain::{Chain, ChainError};

/// The USDC mint on mainnet-beta (Circle).
pub const MAINNET_USDC_MINT: Pubkey =
    Pubkey::from_str_const("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v");
/// The USDC mint on devnet (Circle).
pub const DEVNET_USDC_MINT: Pubkey =
    Pubkey::from_str_const("4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU");
/// Genesis hash of mainnet-beta (`getGenesisHash`).
pub const MAINNET_GENESIS_HASH: &str = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d";
/// Genesis hash of devnet.
pub const DEVNET_GENESIS_HASH: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";
/// Genesis hash of testnet.
pub const TESTNET_GENESIS_HASH: &str = "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY";

/// A Solana cluster as named in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cluster {
    /// `mainnet-beta`: real money.
    MainnetBeta,
    /// `devnet`.
    Devnet,
    /// `testnet`.
    Testnet,
    /// `localnet`: a local validator or the litesvm chain of the tests and the demo.
    Localnet,
}

impl Cluster {
    /// Every cluster, in the order the names are documented.
    pub const ALL: [Cluster; 4] = [
        Cluster::MainnetBeta,
        Cluster::Devnet,
        Cluster::Testnet,
        Cluster::Localnet,
    ];

    /// The configuration name.
    pub fn name(&self) -> &'static str {
        match self {
            Cluster::MainnetBeta => "mainnet-beta",
            Cluster::Devnet => "devnet",
            Cluster::Testnet => "testnet",
            Cluster::Localnet => "localnet",
        }
    }

    /// The built-in USDC mint of the cluster, if it has one.
    pub fn usdc_mint(&self) -> Option<Pubkey> {
        match self {
            Cluster::MainnetBeta => Some(MAINNET_USDC_MINT),
            Cluster::Devnet => Some(DEVNET_USDC_MINT),
            Cluster::Testnet | Cluster::Localnet => None,
        }
    }

    /// The genesis hash of a public cluster (`None` for `localnet`).
    pub fn genesis_hash(&self) -> Option<Hash> {
        let text = match self {
            Cluster::MainnetBeta => MAINNET_GENESIS_HASH,
            Cluster::Devnet => DEVNET_GENESIS_HASH,
            Cluster::Testnet => TESTNET_GENESIS_HASH,
            Cluster::Localnet => return None,
        };
        text.parse().ok()
    }

    /// The public cluster whose genesis hash this is, if any.
    pub fn of_genesis(genesis: &Hash) -> Option<Cluster> {
        Cluster::ALL
            .into_iter()
            .find(|c| c.genesis_hash().as_ref() == Some(genesis))
    }

    /// Whether `mint` may be paid in on this cluster: its built-in USDC mint, a mint of
    /// `allowed`, or (on `localnet` only) any mint.
    pub fn check_mint_allowed(
        &self,
        mint: &Pubkey,
        allowed: &[Pubkey],
    ) -> Result<(), ClusterError> {
        if *self == Cluster::Localnet
            || self.usdc_mint().as_ref() == Some(mint)
            || allowed.contains(mint)
        {
            return Ok(());
        }
        Err(ClusterError::MintNotAllowed {
            mint: *mint,
            cluster: *self,
        })
    }
}

impl std::fmt::Display for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Cluster {
    type Err = ClusterError;
    fn from_str(text: &str) -> Result<Self, ClusterError> {
        Cluster::ALL
            .into_iter()
            .find(|c| c.name() == text.trim())
            .ok_or_else(|| ClusterError::InvalidCluster(text.to_string()))
    }
}

/// Why the cluster or the mint was refused. [`ClusterError::code`] is a stable code.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Not one of `mainnet-beta`, `devnet`, `testnet`, `localnet`.
    #[error("cluster {0:?} is not one of mainnet-beta, devnet, testnet, localnet")]
    InvalidCluster(String),
    /// The mint is not the cluster's USDC and not explicitly allowed.
    #[error(
        "mint {mint} is not allowed on {cluster}: {}; list it in solana.allowed_mints to pay in it anyway",
        match cluster.usdc_mint() {
            Some(usdc) => format!("the USDC mint of {cluster} is {usdc}"),
            None => format!("{cluster} has no built-in USDC mint"),
        }
    )]
    MintNotAllowed {
        /// The configured mint.
        mint: Pubkey,
        /// The configured cluster.
        cluster: Cluster,
    },
    /// The node is not on the configured cluster.
    #[error(
        "the node at the configured rpc_url is {}, not {cluster} (genesis hash {genesis})",
        match Cluster::of_genesis(genesis) {
            Some(c) => c.name().to_string(),
            None => "a local or private cluster".to_string(),
        }
    )]
    ClusterMismatch {
        /// The configured cluster.
        cluster: Cluster,
        /// The node's genesis hash.
        genesis: Hash,
    },
    /// The chain could not be asked.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

impl ClusterError {
    /// Stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ClusterError::InvalidCluster(_) => "invalid_cluster",
            ClusterError::MintNotAllowed { .. } => "mint_not_allowed",
            ClusterError::ClusterMismatch { .. } => "cluster_mismatch",
            ClusterError::Chain(_) => "chain_unreachable",
        }
    }
}

/// Check that the node behind `chain` is on `cluster`: a public cluster's genesis hash
/// must match; a `localnet` node must not have a public cluster's genesis hash.
pub async fn check_cluster(chain: &dyn Chain, cluster: Cluster) -> Result<(), ClusterError> {
    let genesis = chain.genesis_hash().await?;
    let matches = match cluster.genesis_hash() {
        Some(expected) => genesis == expected,
        None => Cluster::of_genesis(&genesis).is_none(),
    };
    if matches {
        Ok(())
    } else {
        Err(ClusterError::ClusterMismatch { cluster, genesis })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for c in Cluster::ALL {
            assert_eq!(c.name().parse::<Cluster>().unwrap(), c);
        }
        let err = "mainnet".parse::<Cluster>().unwrap_err();
        assert_eq!(err.code(), "invalid_cluster");
    }

    #[test]
    fn only_the_clusters_usdc_or_an_allowed_mint_passes() {
        let other = Pubkey::new_unique();
        let ok = |c: Cluster, m: &Pubkey, allowed: &[Pubkey]| c.check_mint_allowed(m, allowed);
        assert!(ok(Cluster::MainnetBeta, &MAINNET_USDC_MINT, &[]).is_ok());
        assert!(ok(Cluster::Devnet, &DEVNET_USDC_MINT, &[]).is_ok());
        // Devnet's USDC is not mainnet's, and the reverse.
        for (cluster, mint) in [
            (Cluster::MainnetBeta, DEVNET_USDC_MINT),
            (Cluster::Devnet, MAINNET_USDC_MINT),
            (Cluster::MainnetBeta, other),
            (Cluster::Testnet, other),
        ] {
            let err = ok(cluster, &mint, &[]).unwrap_err();
            assert_eq!(err.code(), "mint_not_allowed");
            let text = err.to_string();
            assert!(
                text.contains(&mint.to_string()) && text.contains(cluster.name()),
                "{text}"
            );
        }
        assert!(ok(Cluster::MainnetBeta, &other, &[other]).is_ok());
        assert!(ok(Cluster::Testnet, &other, &[other]).is_ok());
        assert!(ok(Cluster::Localnet, &other, &[]).is_ok());
    }

    #[test]
    fn genesis_hashes_name_their_cluster() {
        for c in [Cluster::MainnetBeta, Cluster::Devnet, Cluster::Testnet] {
            let genesis = c.genesis_hash().expect("a public cluster");
            assert_eq!(Cluster::of_genesis(&genesis), Some(c));
        }
        assert_eq!(Cluster::Localnet.genesis_hash(), None);
        assert_eq!(Cluster::of_genesis(&Hash::new_unique()), None);
    }
}
