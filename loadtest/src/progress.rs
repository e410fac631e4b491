//! The progress bar of a run: callers finished out of scheduled, with the live counts an
//! operator watches during a drop (accepted, refused, unknown). Drawn on stderr, ten times a
//! second, only when stderr is a terminal, so reports piped to files stay clean.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::record::Recorder;

pub struct Progress {
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

pub fn start(recorder: Arc<Recorder>, callers: u64, quiet: bool) -> Progress {
    let bar = if quiet {
        ProgressBar::with_draw_target(Some(callers), ProgressDrawTarget::hidden())
    } else {
        ProgressBar::new(callers)
    };
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} done · {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let shown = bar.clone();
    let ticker = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let p = &recorder.progress;
            let finished = p.finished.load(Ordering::Relaxed);
            let refused = p.refused.load(Ordering::Relaxed);
            let unknown = p.unknown.load(Ordering::Relaxed);
            shown.set_position(finished + refused + unknown);
            shown.set_message(format!(
                "arrived {} · accepted {} · refused {} · unknown {}",
                p.arrived.load(Ordering::Relaxed),
                p.accepted.load(Ordering::Relaxed),
                refused,
                unknown
            ));
        }
    });
    Progress { bar, ticker }
}

impl Progress {
    pub fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}
