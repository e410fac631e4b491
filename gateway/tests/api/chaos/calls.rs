//! The webhook half of the load: `call` commands of a few providers and accounts (two limit
//! keys each: the provider's start rate and the account's concurrency), some replayed with
//! their key, some cancelled right after their `202` (most are still waiting then, some are
//! already at the backend, where a cancel only records the intent).

use std::time::Duration;

use hyper::Method;
use serde_json::json;
use uuid::Uuid;

use super::load::{Answer, Cancel, Class, Shared, attempt_of, send};

/// The provider and account of the n-th call: spread over every account.
pub(super) fn account_of(i: u64, providers: usize, accounts: usize) -> (String, String) {
    let provider = i as usize % providers;
    let account = (i as usize / providers) % accounts;
    (format!("p{provider}"), format!("p{provider}-a{account}"))
}

impl Shared {
    /// Call subject `i`: one key; a replay of it now and then; a cancel now and then.
    pub(super) async fn call_subject(&self, i: u64) {
        let subject = format!("w-{i}");
        let (provider, account) = account_of(i, self.config.providers, self.config.accounts);
        let input = json!({"provider": provider, "account": account, "n": i.to_string()});
        let key = format!("c-{i}");
        let gateway = i as usize + 1;
        let first = self
            .enqueue("call", &subject, &key, input.clone(), gateway, None)
            .await;
        let Some(id) = first.command_id else {
            return;
        };
        if i.is_multiple_of(self.config.cancel_every) {
            self.cancel(id, gateway + 1).await;
        }
        if i.is_multiple_of(self.config.replay_every) {
            self.enqueue("call", &subject, &key, input, gateway + 1, Some(id))
                .await;
        }
    }

    /// `POST /v1/commands/{id}:cancel`, sent again while its outcome is unknown (a cancel is
    /// idempotent); records what it answered.
    async fn cancel(&self, command_id: Uuid, first_gateway: usize) {
        let mut attempts = Vec::new();
        let mut answered_status = None;
        for n in 0..self.config.max_attempts {
            let gateway = first_gateway + n as usize;
            let url = format!("{}/v1/commands/{command_id}:cancel", self.base(gateway));
            let started = self.now();
            let answer = send(
                &self.client,
                Method::POST,
                &url,
                Some(&self.credential),
                Some(&json!({})),
                Duration::from_secs(15),
            )
            .await;
            let attempt = attempt_of(true, gateway, started, self.now(), &answer);
            let class = attempt.class();
            attempts.push(attempt);
            if let Answer::Http {
                status: 200, body, ..
            } = &answer
            {
                answered_status = body["data"]["status"].as_str().map(str::to_string);
                break;
            }
            if class == Class::Refused {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100 << n.min(3))).await;
        }
        self.cancels.lock().expect("cancels lock").push(Cancel {
            command_id,
            attempts,
            answered_status,
        });
    }
}
