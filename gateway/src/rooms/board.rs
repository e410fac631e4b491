//! Waiting places' polls answered from the gateway's memory.
//!
//! A room drop is polled by everyone in it every second or two; a query per poll would make
//! PostgreSQL the ceiling of the page everyone watches. A waiting place's position is its queue
//! order minus the room's admission front, less one (`sluice_store::rooms::board`), so this
//! keeps, per room: the front (read again once it is [`FRESH`] old, by one poll while the
//! others use the last one), the drawn order of the pre-queue (read once, it never changes),
//! and the places that left the queue (read incrementally with the front). The place's own
//! order comes from its ticket (version 5, `crate::identity::ticket`).
//!
//! What it answers is never ahead of PostgreSQL: the front only moves forward, so an older one
//! tells a larger position, never a smaller one. A place at or behind the front has had its
//! turn ([`Look::AtItsTurn`]): its poll reads PostgreSQL, where its pass is. A place known to
//! have left is answered so from memory (a leave is final). Anything this cannot place (a room
//! it cannot read) is [`Look::Unknown`]: PostgreSQL within the fallback budget.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use moka::future::Cache;
use sluice_durable::DurableError;
use sluice_durable::ids::NamespaceId;
use sluice_store::rooms::board::{self, Front, LEAVES_OVERLAP};
use sqlx::PgPool;
use uuid::Uuid;

use crate::identity::ticket::Seat;

/// How old a room's front may be before a poll reads it again: one admission tick.
pub const FRESH: Duration = crate::rooms::ticker::TICK;
/// How old a front may still be used while another poll is reading the next one (or the read
/// fails): beyond this, a poll waits for the read.
const USABLE: Duration = Duration::from_secs(5);

/// What memory says about a place.
#[derive(Debug, Clone)]
pub enum Look {
    /// Still waiting: `position` places ahead (`None` before the draw: everyone in the
    /// pre-queue is at the start), as of `front.observed_at`, read `age` ago.
    Waiting {
        position: Option<u64>,
        front: Front,
        age: Duration,
    },
    /// It left the queue (PostgreSQL committed the leave; nothing changes a left place again).
    Left { front: Front },
    /// The front reached it: admitted, or ended since. PostgreSQL holds what it is.
    AtItsTurn,
    /// Memory cannot place it (its room is gone, or its drawn order is not known here).
    Unknown,
}

/// Every room this gateway has been asked about.
pub struct RoomBoards {
    boards: Cache<(NamespaceId, String), Arc<Board>>,
    /// Polls answered from memory, and reads of a room that answered them: what the memory
    /// saves is the first over the second (tests and benchmarks read them).
    pub answered: AtomicU64,
    pub reads: AtomicU64,
}

impl Default for RoomBoards {
    fn default() -> Self {
        Self {
            boards: Cache::builder()
                .max_capacity(10_000)
                .time_to_idle(Duration::from_secs(600))
                .build(),
            answered: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        }
    }
}

impl RoomBoards {
    /// Where the place `id` (of `seat`) stands, reading PostgreSQL only to refresh its room.
    pub async fn look(
        &self,
        pg: &PgPool,
        namespace_id: NamespaceId,
        id: Uuid,
        seat: &Seat,
    ) -> Result<Look, DurableError> {
        let board = self
            .boards
            .get_with((namespace_id, seat.room.clone()), async {
                Arc::new(Board::default())
            })
            .await;
        let Some((front, age)) = board
            .front(pg, namespace_id, &seat.room, &self.reads)
            .await?
        else {
            return Ok(Look::Unknown);
        };
        let look = board.place(id, seat, front, age);
        if matches!(look, Look::Waiting { .. } | Look::Left { .. }) {
            self.answered.fetch_add(1, Ordering::Relaxed);
        }
        Ok(look)
    }

    /// Tells this gateway's board at once that `id` left (PostgreSQL committed it; other
    /// gateways learn of a leave from the queue with their next read of the room).
    pub async fn left(&self, namespace_id: NamespaceId, room: &str, id: Uuid) {
        if let Some(board) = self.boards.get(&(namespace_id, room.to_string())).await {
            board.write_left().insert(id);
        }
    }
}

/// One room as this gateway knows it.
#[derive(Default)]
struct Board {
    /// The last front read and when.
    front: RwLock<Option<(Front, Instant)>>,
    /// Places that left: the queue before the front reached them, or (told by this gateway's
    /// own leaves) any. One entry per leave at most, so no larger than the room's places.
    left: RwLock<HashSet<Uuid>>,
    /// The drawn order of the pre-queue, once the room is drawn.
    drawn: OnceLock<HashMap<Uuid, i64>>,
    /// Held by the one poll reading the room again; the clock up to which leaves were read.
    reading: tokio::sync::Mutex<Option<DateTime<Utc>>>,
}

impl Board {
    /// The room's front and its age, read again when older than [`FRESH`]; `None` when the
    /// room is gone.
    async fn front(
        &self,
        pg: &PgPool,
        namespace_id: NamespaceId,
        room: &str,
        reads: &AtomicU64,
    ) -> Result<Option<(Front, Duration)>, DurableError> {
        if let Some(front) = self.known(FRESH) {
            return Ok(Some(front));
        }
        // One poll reads; the others use the last front while it is usable.
        let mut reading = match self.reading.try_lock() {
            Ok(reading) => reading,
            Err(_) => {
                if let Some(front) = self.known(USABLE) {
                    return Ok(Some(front));
                }
                self.reading.lock().await
            }
        };
        // Read meanwhile by the poll that held the lock.
        if let Some(front) = self.known(FRESH) {
            return Ok(Some(front));
        }
        reads.fetch_add(1, Ordering::Relaxed);
        match self.read(pg, namespace_id, room, &mut reading).await {
            Ok(front) => Ok(front.map(|front| (front, Duration::ZERO))),
            Err(error) => match self.known(USABLE) {
                Some(front) => {
                    tracing::debug!(%error, room, "room front not read; answering from the last");
                    Ok(Some(front))
                }
                None => Err(error),
            },
        }
    }

    /// The last front and its age, if it was read within `age`.
    fn known(&self, age: Duration) -> Option<(Front, Duration)> {
        let front = self.front.read().unwrap_or_else(|e| e.into_inner());
        front
            .as_ref()
            .map(|(front, at)| (front, at.elapsed()))
            .filter(|(_, elapsed)| *elapsed < age)
            .map(|(front, elapsed)| (front.clone(), elapsed))
    }

    /// Reads the front, the leaves since the last read, and the draw once it is made.
    async fn read(
        &self,
        pg: &PgPool,
        namespace_id: NamespaceId,
        room: &str,
        leaves_through: &mut Option<DateTime<Utc>>,
    ) -> Result<Option<Front>, DurableError> {
        let Some(front) = board::front(pg, namespace_id, room).await? else {
            return Ok(None);
        };
        // From the beginning the first time; then back by the overlap, so a leave whose
        // statement read its clock before the last read and committed after it is not missed.
        let since = leaves_through.map_or(DateTime::<Utc>::UNIX_EPOCH, |through| {
            through - chrono::Duration::from_std(LEAVES_OVERLAP).unwrap_or_default()
        });
        let left = board::left_since(pg, namespace_id, room, since).await?;
        if front.drawn && self.drawn.get().is_none() {
            let order = board::drawn_order(pg, namespace_id, room).await?;
            let _ = self.drawn.set(order.into_iter().collect());
        }
        {
            let mut known = self.write_left();
            for (id, ord) in left {
                // A place the front has passed is read from PostgreSQL anyway.
                if ord.is_none_or(|ord| ord > front.admitted_through) {
                    known.insert(id);
                }
            }
        }
        *leaves_through = Some(front.observed_at);
        *self.front.write().unwrap_or_else(|e| e.into_inner()) =
            Some((front.clone(), Instant::now()));
        Ok(Some(front))
    }

    fn write_left(&self) -> std::sync::RwLockWriteGuard<'_, HashSet<Uuid>> {
        self.left.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the place stands against `front`, read `age` ago.
    fn place(&self, id: Uuid, seat: &Seat, front: Front, age: Duration) -> Look {
        if self
            .left
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
        {
            return Look::Left { front };
        }
        let ord = if seat.ord > 0 {
            seat.ord
        } else if !front.drawn {
            return Look::Waiting {
                position: None,
                front,
                age,
            };
        } else {
            match self.drawn.get().and_then(|order| order.get(&id)) {
                Some(ord) => *ord,
                None => return Look::Unknown,
            }
        };
        if ord <= front.admitted_through {
            return Look::AtItsTurn;
        }
        Look::Waiting {
            position: Some(u64::try_from(ord - front.admitted_through - 1).unwrap_or(0)),
            front,
            age,
        }
    }
}
