//! Single flight inside one process: concurrent lookups of one key share one lookup.
//!
//! Each caller holds a [`Seat`] on the key's flight while it waits; the flight leaves the map
//! when its last seat is given up, whether the lookup ended or its callers went away (a client
//! that disconnects drops its request's future). Without that, every key whose only caller
//! left mid-lookup would stay in the map for the life of the process: a caller could grow it
//! without bound by asking for many keys and hanging up.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;

/// The flights of one process, by key.
pub struct Flights<T> {
    map: Arc<Mutex<HashMap<String, Arc<OnceCell<T>>>>>,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Self {
            map: Arc::default(),
        }
    }
}

/// One caller's place on a key's flight.
pub struct Seat<T> {
    map: Arc<Mutex<HashMap<String, Arc<OnceCell<T>>>>>,
    key: String,
    flight: Arc<OnceCell<T>>,
}

impl<T: Clone> Flights<T> {
    /// Joins the key's flight, starting one if none is in the air.
    pub fn join(&self, key: &str) -> Seat<T> {
        let flight = self
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .clone();
        Seat {
            map: self.map.clone(),
            key: key.to_owned(),
            flight,
        }
    }

    /// Keys with a flight in the air.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Clone> Seat<T> {
    /// The flight's answer: this caller runs `lookup` unless another seat's run ended first or
    /// is under way (if that caller goes away, a waiting one takes over).
    pub async fn answer<F, Fut>(&self, lookup: F) -> T
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        self.flight.get_or_init(lookup).await.clone()
    }
}

impl<T> Drop for Seat<T> {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        // Seats are taken under this lock, so the count is exact here: the map's reference and
        // this seat's mean nobody else waits on this flight.
        let last = Arc::strong_count(&self.flight) <= 2;
        if last
            && map
                .get(&self.key)
                .is_some_and(|current| Arc::ptr_eq(current, &self.flight))
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flight_lands_once_for_every_seat_and_then_leaves_the_map() {
        let flights: Flights<u32> = Flights::default();
        let (a, b) = (flights.join("k"), flights.join("k"));
        assert_eq!(flights.len(), 1);
        assert_eq!(a.answer(|| async { 7 }).await, 7);
        assert_eq!(b.answer(|| async { 8 }).await, 7, "one lookup for both");
        drop(a);
        assert_eq!(flights.len(), 1, "b still holds it");
        drop(b);
        assert!(flights.is_empty());
    }

    /// A caller that goes away mid-lookup (its future dropped, as when a client disconnects)
    /// leaves nothing behind.
    #[tokio::test]
    async fn a_caller_that_goes_away_mid_lookup_leaves_no_flight() {
        let flights: Flights<u32> = Flights::default();
        let seat = flights.join("k");
        let lookup = async move { seat.answer(std::future::pending).await };
        let cut = tokio::time::timeout(std::time::Duration::from_millis(10), lookup).await;
        assert!(cut.is_err());
        assert!(flights.is_empty(), "the abandoned flight stayed");
        // A new caller starts a new flight and lands it.
        let again = flights.join("k");
        assert_eq!(again.answer(|| async { 3 }).await, 3);
    }

    /// When one of two waiting callers goes away, the other keeps the flight and lands it.
    #[tokio::test]
    async fn the_other_caller_keeps_the_flight() {
        let flights: Flights<u32> = Flights::default();
        let (gone, stays) = (flights.join("k"), flights.join("k"));
        let lookup = async move { gone.answer(std::future::pending).await };
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(10), lookup)
                .await
                .is_err()
        );
        assert_eq!(flights.len(), 1);
        assert_eq!(stays.answer(|| async { 5 }).await, 5);
        drop(stays);
        assert!(flights.is_empty());
    }
}
