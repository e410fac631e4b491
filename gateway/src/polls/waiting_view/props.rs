//! Properties of the rank from runs, against a brute-force rank over a random sorted set of
//! unique sequences: whatever the holes and interleaving, of a prefix pulled (the script's cap
//! or budget) and of the runs kept, a sequence gets its index in the set if the kept runs cover
//! it, and nothing otherwise.

use super::Ranks;
use super::tests::runs_of;
use proptest::prelude::*;
use std::collections::BTreeSet;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_rank_from_runs_is_the_index_in_the_set(
        set in proptest::collection::btree_set(0u64..3_000, 0..700),
        pulled in 0.0f64..=1.0,
        kept in 0usize..400,
    ) {
        let seqs: Vec<u64> = set.iter().copied().collect();
        // The pull covers a prefix of the queue, then the gateway keeps at most `kept` runs.
        let prefix = &seqs[..(seqs.len() as f64 * pulled) as usize];
        let runs = runs_of(prefix);
        let ranks = Ranks::new(&runs, kept);
        let covered: u64 = runs.iter().take(kept).map(|(_, length)| length).sum();
        prop_assert_eq!(ranks.covered(), covered);
        let members: BTreeSet<u64> = seqs.iter().copied().collect();
        for seq in 0..3_010u64 {
            let brute = seqs
                .iter()
                .position(|s| *s == seq)
                .map(|i| i as u64)
                .filter(|i| *i < covered);
            prop_assert_eq!(ranks.rank_of(seq), brute, "sequence {}", seq);
            if ranks.rank_of(seq).is_some() {
                prop_assert!(members.contains(&seq));
            }
        }
    }
}
