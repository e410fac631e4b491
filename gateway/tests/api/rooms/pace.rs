//! `admit_per_minute` as PostgreSQL records it: the instants of the admissions (`admitted_at`,
//! the database time of the step that admitted each place) against the bucket the room
//! declares, both ways: never more than it allows, and no fewer while people wait.
//!
//! The bucket (`durable/store/src/rooms/admission.rs`) refills at r = admit_per_minute / 60 a second
//! and holds at most c = max(1, r); a step admits the whole tokens it holds. So, with u₀ < u₁ <
//! … the instants at which steps admitted someone and nᵢ how many each admitted:
//!
//! - at most: nᵢ + … + nⱼ ≤ c + r · (uⱼ − uᵢ), whatever the steps;
//! - at least, while places are still waiting after uⱼ: n₁ + … + nⱼ ≥ r · (uⱼ − u₀) − 1 − L,
//!   where a step leaves less than a token behind, and L is what a full bucket may have lost:
//!   between uₖ₋₁ and uₖ at most max(0, r · (uₖ − uₖ₋₁) − (c − 1)) tokens.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;
use sluice_store::tenancy;

use super::kit::*;
use crate::support::*;

const PEOPLE: usize = 30;
const PER_MINUTE: f64 = 300.0;

fn declaration(opens_at: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "{CLAIM_DECLARATION}\n[[room]]\ncode = \"paced\"\nadmit_per_minute = {PER_MINUTE}\n\
         opens_at = \"{}\"\n",
        opens_at.format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// 30 people wait in the pre-queue of a room admitting 300 a minute (5 a second, a burst of 5);
/// the start is brought forward to a moment from now, and the room admits them all in about
/// five seconds. The admission instants in PostgreSQL hold both bounds of the module's doc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_keep_to_admit_per_minute_and_reach_it() {
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let stack = Stack::with_declaration(&declaration(later)).await;
    for person in 0..PEOPLE {
        let reply = join(&stack, "paced", &format!("p{person}")).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        assert_eq!(reply.data()["prequeue"], json!(true));
    }
    // Everyone waits when the room opens, so every step but the last finds people to admit.
    let start = chrono::Utc::now() + chrono::Duration::seconds(2);
    tenancy::apply_declaration(
        &stack.pg,
        stack.creds.namespace_id,
        &declaration(start),
        "test",
        None,
    )
    .await
    .expect("bring the start forward");
    let admitted = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM room_places
              WHERE namespace_id = $1 AND room = 'paced' AND admitted_at IS NOT NULL",
        )
        .bind(stack.creds.namespace_id)
        .fetch_one(&stack.pg)
        .await
        .expect("count admissions")
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            admitted().await == PEOPLE as i64
        })
        .await,
        "{} of {PEOPLE} admitted",
        admitted().await
    );
    // Seconds since the first admission, and how many each admitting step let in.
    let steps: Vec<(f64, i64)> = sqlx::query_as(
        "SELECT extract(epoch FROM admitted_at - min(admitted_at) OVER ())::float8, count(*)
           FROM room_places WHERE namespace_id = $1 AND room = 'paced'
          GROUP BY admitted_at ORDER BY admitted_at",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("the admission instants");
    let rate = PER_MINUTE / 60.0;
    let capacity = rate.max(1.0);
    let total: i64 = steps.iter().map(|s| s.1).sum();
    assert_eq!(total, PEOPLE as i64, "each place admitted once");
    let span = steps.last().expect("admissions").0;
    eprintln!(
        "{PEOPLE} admitted in {} steps over {span:.2} s: {steps:?}",
        steps.len()
    );

    for i in 0..steps.len() {
        let mut count = 0;
        for j in i..steps.len() {
            count += steps[j].1;
            let allowed = capacity + rate * (steps[j].0 - steps[i].0);
            assert!(
                count as f64 <= allowed + 1e-6,
                "{count} admitted from {:.3} s to {:.3} s; the bucket allows {allowed:.2}",
                steps[i].0,
                steps[j].0
            );
        }
    }

    // The first step takes the full bucket; the pace is judged after it, up to the step before
    // the queue ran out.
    let (mut count, mut lost) = (0, 0.0);
    for k in 1..steps.len() - 1 {
        let gap = steps[k].0 - steps[k - 1].0;
        lost += (rate * gap - (capacity - 1.0)).max(0.0);
        count += steps[k].1;
        let owed = rate * steps[k].0 - 1.0 - lost;
        assert!(
            count as f64 + 1e-6 >= owed,
            "only {count} admitted in the {:.3} s after the first step, while people waited: \
             {rate}/s owes {owed:.2}",
            steps[k].0
        );
    }
    // Steps late enough for the full bucket to overflow would excuse any pace: a burst's worth
    // at most (a stalled machine), where admitting a burst every two seconds would lose more at
    // its first gap.
    assert!(
        lost < capacity,
        "late steps lost {lost:.2} admissions to a full bucket"
    );
}
