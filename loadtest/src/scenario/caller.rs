//! One caller of a run: a person of a sale (reads the offer, then acts) or a backend service
//! (acts with its credential), each arriving at its scheduled instant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::json;
use sluice_store::tenancy::BootstrapOutput;
use uuid::Uuid;

use super::holder::Holding;
use super::journey::{Context, Intent};
use crate::api::{Outcome, exchange};
use crate::bench_stack::BoxError;

/// Reads the offer once before the arrivals, as a sale's page would be warmed, so the drop
/// measures a hot cache (a cold one is the read cache's own test).
pub(super) async fn warm_offer(
    client: &crate::driver::HttpClient,
    base: &str,
    creds: &BootstrapOutput,
    offer: Uuid,
) -> Result<(), BoxError> {
    let uri = format!("{base}/v1/reads/offer?offer={offer}");
    let answer = exchange(client, Method::GET, &uri, Some(&creds.credential), None).await;
    match answer.outcome {
        Outcome::Success { .. } => Ok(()),
        other => Err(format!("warming the offer read failed: {other:?}").into()),
    }
}

/// One caller of the run.
pub(super) struct Caller {
    pub(super) context: Arc<Context>,
    pub(super) index: u64,
    pub(super) arrive_at: Instant,
    pub(super) run_id: String,
}

/// Endpoint name of the offer read in the report.
pub(super) const READ_OFFER: &str = "read offer";

impl Caller {
    /// A person in a sale: reads the offer (retrying a `filling` answer within its patience),
    /// then claims, polls and reads the result; a winner of a reserved unit then does with it
    /// what `holding` has it do.
    pub(super) async fn person(
        self,
        key: &sluice_store::tenancy::SubjectKeyOutput,
        offer: Uuid,
        holding: Option<Arc<Holding>>,
    ) {
        // A person holds their token before the sale opens (issued at sign-in), so minting it
        // is not part of the arrival.
        let subject = format!("person-{}-{}", self.run_id, self.index);
        let token = subject_token(key, &subject);
        let uri = format!("{}/v1/reads/offer?offer={offer}", self.context.base);
        tokio::time::sleep_until(self.arrive_at.into()).await;
        let arrived = Instant::now();
        let recorder = &self.context.recorder;
        recorder.arrival(arrived);
        for _ in 0..5 {
            let answer =
                exchange(&self.context.client, Method::GET, &uri, Some(&token), None).await;
            recorder.exchange(READ_OFFER, &answer);
            match answer.outcome {
                Outcome::Success { .. } => {
                    recorder.entered();
                    break;
                }
                Outcome::Refused {
                    retryable: true,
                    retry_after,
                    ..
                } => {
                    tokio::time::sleep(retry_after.unwrap_or(Duration::from_secs(1))).await;
                }
                _ => break,
            }
        }
        let body = json!({
            "request_key": format!("claim-{}", self.index),
            "input": {"offer": offer},
        });
        let result = self
            .context
            .act(Intent {
                command: "claim",
                bearer: &token,
                body: body.to_string(),
                arrived,
            })
            .await;
        if let (Some(holding), Some(result)) = (holding, result) {
            holding.hold(&self.context, &token, arrived, result).await;
        }
    }

    /// A backend service's call: enqueued with the credential for a subject of its own.
    pub(super) async fn service(self, credential: &str, providers: u32, accounts: u32) {
        tokio::time::sleep_until(self.arrive_at.into()).await;
        let arrived = Instant::now();
        self.context.recorder.arrival(arrived);
        self.context.recorder.entered();
        let account = (self.index % u64::from(accounts)) as u32;
        let provider = account % providers;
        let body = json!({
            "request_key": format!("call-{}-{}", self.run_id, self.index),
            "subject": format!("service-{}", self.index),
            "input": {"provider": format!("p{provider}"), "account": format!("a{account}")},
        });
        self.context
            .act(Intent {
                command: "call",
                bearer: credential,
                body: body.to_string(),
                arrived,
            })
            .await;
    }
}

/// An HS256 subject token for `subject`, valid for an hour, signed with the namespace's key
/// (its secret as shown).
pub(super) fn subject_token(
    key: &sluice_store::tenancy::SubjectKeyOutput,
    subject: &str,
) -> String {
    let now = sluice_gateway::identity::auth::now_unix();
    sluice_gateway::identity::subject_token::issue(
        &key.id,
        key.secret.as_bytes(),
        subject,
        now,
        now + 3600,
    )
}
