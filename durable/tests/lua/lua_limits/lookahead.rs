//! Lookahead: a head held back only by its own keys lets the next commands pass, keeps its place and its free keys, and the lookahead is bounded.

use super::*;

/// `acct:sat`, the key of [`holding_acct_sat`]'s holder.
const SAT: (&str, &str) = ("acct:{a}", "acct:sat");

/// A bench whose `ocr` commands name `acct:{a}` (one in flight), with [`SAT`] held by a command
/// admitted from resource `elsewhere`: that command is returned, to be finished later.
async fn holding_acct_sat() -> (Arc<Bench>, CommandId) {
    let bench = Bench::new().await;
    bench
        .configure(&[("ocr", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    let holder = bench.push("ocr", "elsewhere", &[SAT]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![holder]);
    (bench, holder)
}

/// Lookahead: a head held back only by its own saturated key lets the next command (other key)
/// go and stays first in line; it is admitted as soon as its key has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookahead_passes_a_head_held_back_by_its_own_key() {
    let (bench, holder) = holding_acct_sat().await;
    let free = ("acct:{a}", "acct:free");

    let head = bench.push("ocr", "r", &[SAT]).await;
    let second = bench.push("ocr", "r", &[free]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![second], "the second goes");
    assert_eq!(
        bench.queue("ocr", "r").await,
        vec![head],
        "the head stays first"
    );
    assert_eq!(bench.status(head).await.as_deref(), Some("accepted"));
    assert_eq!(
        bench.members(&bench.limit_leases("acct:free")).await,
        HashSet::from([second.to_string()])
    );
    let third = bench.push("ocr", "r", &[SAT]).await;
    assert!(
        bench.admit(10).await.is_empty(),
        "acct:sat and acct:free are full"
    );

    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(
        ids(&bench.admit(10).await),
        vec![head],
        "the head, not the later one"
    );
    assert_eq!(bench.queue("ocr", "r").await, vec![third]);
}

/// Two commands with the same saturated key keep their order behind it (neither goes); a later
/// command with another key still passes both; released, the older of the two goes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_with_the_same_key_keep_their_order() {
    let (bench, holder) = holding_acct_sat().await;
    let first = bench.push("ocr", "r", &[SAT]).await;
    let second = bench.push("ocr", "r", &[SAT]).await;
    let other = bench.push("ocr", "r", &[("acct:{a}", "acct:other")]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![other]);
    assert_eq!(bench.queue("ocr", "r").await, vec![first, second]);

    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(ids(&bench.admit(10).await), vec![first]);
    assert_eq!(bench.queue("ocr", "r").await, vec![second]);
    assert!(bench.admit(10).await.is_empty());
    assert!(bench.finish("ocr", "r", first, "succeeded").await);
    assert_eq!(ids(&bench.admit(10).await), vec![second]);
}

/// A head held back by one of its two keys keeps the other from the commands behind it: a
/// follower needing only the free key waits (taking it would let the head wait as long as
/// followers keep taking each key as it frees), a follower sharing no key with the head goes.
/// Released, the head takes both keys, then the follower its one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_head_keeps_its_free_keys_from_those_behind_it() {
    let (bench, holder) = holding_acct_sat().await;
    let region = ("region:{r}", "region:eu");
    bench
        .configure(
            &[("ocr", OPEN)],
            &[("acct:{a}", "1 0 0"), ("region:{r}", "1 0 0")],
        )
        .await;
    let head = bench.push("ocr", "r", &[SAT, region]).await;
    let follower = bench.push("ocr", "r", &[region]).await;
    let unrelated = bench.push("ocr", "r", &[("acct:{a}", "acct:free")]).await;
    assert_eq!(
        ids(&bench.admit(10).await),
        vec![unrelated],
        "only the command sharing no key with the head"
    );
    assert!(
        bench
            .members(&bench.limit_leases("region:eu"))
            .await
            .is_empty(),
        "region:eu is kept for the head"
    );
    assert!(bench.admit(10).await.is_empty(), "still held back");

    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(
        ids(&bench.admit(10).await),
        vec![head],
        "the head, both keys"
    );
    assert!(
        bench.admit(10).await.is_empty(),
        "region:eu is the head's now"
    );
    assert!(bench.finish("ocr", "r", head, "succeeded").await);
    assert_eq!(ids(&bench.admit(10).await), vec![follower]);
}

/// Only the first `lookahead` commands are looked at: with lookahead 1 a held-back head blocks
/// its queue; a free command third in line goes with lookahead 3, not 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookahead_is_bounded() {
    let (bench, holder) = holding_acct_sat().await;
    let head = bench.push("ocr", "r", &[SAT]).await;
    let second = bench.push("ocr", "r", &[SAT]).await;
    let free = bench.push("ocr", "r", &[("acct:{a}", "acct:free")]).await;
    assert!(bench.admit_with(10, 1).await.is_empty(), "lookahead 1");
    assert!(bench.admit_with(10, 2).await.is_empty(), "lookahead 2");
    assert_eq!(bench.queue("ocr", "r").await, vec![head, second, free]);
    assert!(
        bench
            .members(&bench.limit_leases("acct:free"))
            .await
            .is_empty()
    );
    assert_eq!(ids(&bench.admit_with(10, 3).await), vec![free]);
    assert_eq!(bench.queue("ocr", "r").await, vec![head, second]);
    // Lookahead 1 with a free head: the head goes as usual.
    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(ids(&bench.admit_with(10, 1).await), vec![head]);
}
