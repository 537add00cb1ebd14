//! The node must be on the configured cluster (genesis hash), so that naming the cluster
//! `localnet`, where any mint is accepted, cannot unpin the mint of a public cluster.

#![cfg(feature = "local-chain")]

use settle_solana::{
    Chain, Cluster, Confirmation, Hash, LocalChain, LocalChainConfig, RpcChain, check_cluster,
    serve_local_chain,
};

fn chain_with_genesis(genesis: Option<Hash>) -> LocalChain {
    let mut config = LocalChainConfig::default();
    if let Some(genesis) = genesis {
        config.genesis_hash = genesis;
    }
    LocalChain::with_config(config)
}

#[tokio::test]
async fn a_node_of_a_public_cluster_is_only_that_cluster_never_localnet() {
    for public in [Cluster::MainnetBeta, Cluster::Devnet, Cluster::Testnet] {
        let chain = chain_with_genesis(public.genesis_hash());
        check_cluster(&chain, public).await.unwrap();
        for other in Cluster::ALL.into_iter().filter(|c| *c != public) {
            let err = check_cluster(&chain, other).await.unwrap_err();
            assert_eq!(err.code(), "cluster_mismatch", "{public} as {other}");
            let text = err.to_string();
            assert!(
                text.contains(public.name()) && text.contains(other.name()),
                "{text}"
            );
        }
    }
}

#[tokio::test]
async fn a_local_node_is_localnet_and_no_public_cluster() {
    let chain = chain_with_genesis(None);
    check_cluster(&chain, Cluster::Localnet).await.unwrap();
    for public in [Cluster::MainnetBeta, Cluster::Devnet, Cluster::Testnet] {
        let err = check_cluster(&chain, public).await.unwrap_err();
        assert_eq!(err.code(), "cluster_mismatch");
        assert!(err.to_string().contains("local or private"), "{err}");
    }
}

#[tokio::test]
async fn the_genesis_hash_travels_through_the_rpc_client() {
    let mainnet = Cluster::MainnetBeta.genesis_hash().unwrap();
    let server = serve_local_chain(chain_with_genesis(Some(mainnet)))
        .await
        .unwrap();
    let rpc = RpcChain::new(server.url(), Confirmation::Confirmed);
    assert_eq!(rpc.genesis_hash().await.unwrap(), mainnet);
    check_cluster(&rpc, Cluster::MainnetBeta).await.unwrap();
    let err = check_cluster(&rpc, Cluster::Localnet).await.unwrap_err();
    assert_eq!(err.code(), "cluster_mismatch");
}
