//! Telling the extension's announcements from anyone's `NOTIFY`: each carries a number and a
//! MAC under the install's key (`<number>:<mac>:<data>`, extension/src/announce.rs), which a
//! host reads once per connection. A forged payload fails the MAC, a replayed one repeats a
//! number already heard: either is ignored for the cost of a hash, with no look at the
//! database (0.3.0 looked on every notification, whoever sent it: #39).
use openssl::sha::{sha256, Sha256};
use tokio_postgres::Client;

use crate::{sql, Result};

/// The install's key and the last number handed out so far, read through
/// `rendezvous._announcement_key()` (granted to `rendezvous_host`).
pub(crate) async fn read_key(client: &Client) -> Result<(Vec<u8>, i64)> {
    let row = sql::query_one(client, sql::ANNOUNCEMENT_KEY, &[]).await?;
    Ok((row.get(0), row.get(1)))
}

/// The number and data of `payload` heard on `channel`, if its MAC holds under `key`.
pub(crate) fn verify<'p>(key: &[u8], channel: &str, payload: &'p str) -> Option<(i64, &'p str)> {
    let (number, rest) = payload.split_once(':')?;
    let (mac, data) = rest.split_once(':')?;
    let n: i64 = number.parse().ok().filter(|n| *n > 0)?;
    // Not a secret compared against an attacker's guesses at speed: equality is enough.
    (expected_mac(key, channel, number, data) == mac).then_some((n, data))
}

/// The hex of SHA-256(key ‖ SHA-256(channel:number:data)), as the extension computes it.
fn expected_mac(key: &[u8], channel: &str, number: &str, data: &str) -> String {
    let mut outer = Sha256::new();
    outer.update(key);
    outer.update(&sha256(format!("{channel}:{number}:{data}").as_bytes()));
    outer.finish().iter().map(|b| format!("{b:02x}")).collect()
}

/// The announcement numbers a connection heard lately (a sliding window, as IPsec's
/// anti-replay): a number is new if it is above the highest heard, or within the window below
/// it and not heard yet. Numbers come from one sequence, so they arrive nearly in order (a
/// transaction that took its number earlier may commit later): the window covers that.
/// Everything handed out before the connection was made counts as heard (a replayer may have
/// recorded it; the look made on connecting covers what it announced); anything a replayer
/// heard since, this connection heard first (notifications are delivered in commit order, and
/// the replay is sent after the original).
pub(crate) struct Heard {
    highest: i64,
    bits: Vec<u64>,
}

/// How many numbers below the highest are still told apart.
const WINDOW: i64 = 1 << 16;

/// A jump further than this past the highest number heard is believed once but not recorded:
/// the sequence cannot have moved that far, so only a holder of the key (a host role) made
/// it up, and it must not push every real number below the window.
const MOST_PLAUSIBLE_JUMP: i64 = 1 << 32;

impl Heard {
    /// Every number up to `last` (the sequence's last value when the connection was made)
    /// counts as heard.
    pub(crate) fn after(last: i64) -> Self {
        Heard { highest: last.max(0), bits: vec![u64::MAX; (WINDOW / 64) as usize] }
    }

    /// Whether `n` (positive) is heard for the first time (and remembers it).
    pub(crate) fn first(&mut self, n: i64) -> bool {
        let highest = self.highest;
        if n > highest.saturating_add(MOST_PLAUSIBLE_JUMP) {
            return true;
        }
        if n > highest {
            if n - highest >= WINDOW {
                self.bits.iter_mut().for_each(|w| *w = 0);
            } else {
                for m in highest + 1..n {
                    self.clear(m);
                }
            }
            self.highest = n;
            self.set(n);
            return true;
        }
        if n <= 0 || highest - n >= WINDOW || self.get(n) {
            return false;
        }
        self.set(n);
        true
    }

    fn slot(n: i64) -> (usize, u64) {
        let i = n.rem_euclid(WINDOW);
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn get(&self, n: i64) -> bool {
        let (w, b) = Self::slot(n);
        self.bits[w] & b != 0
    }

    fn set(&mut self, n: i64) {
        let (w, b) = Self::slot(n);
        self.bits[w] |= b;
    }

    fn clear(&mut self, n: i64) {
        let (w, b) = Self::slot(n);
        self.bits[w] &= !b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(key: &[u8], channel: &str, n: i64, data: &str) -> String {
        format!("{n}:{}:{data}", expected_mac(key, channel, &n.to_string(), data))
    }

    #[test]
    fn only_a_payload_signed_with_the_key_for_its_channel_is_believed() {
        let key = b"k";
        let p = signed(key, "rendezvous_cancel", 7, "42");
        assert_eq!(verify(key, "rendezvous_cancel", &p), Some((7, "42")));
        assert_eq!(verify(b"other", "rendezvous_cancel", &p), None);
        assert_eq!(verify(key, "rendezvous_runs", &p), None, "another channel");
        assert_eq!(verify(key, "rendezvous_cancel", &p.replace(":42", ":43")), None, "other data");
        assert_eq!(verify(key, "rendezvous_cancel", &p.replacen('7', "8", 1)), None, "another number");
        for junk in ["", "42", "1:2", "x:y:z", "::"] {
            assert_eq!(verify(key, "rendezvous_runs", junk), None, "{junk:?}");
        }
    }

    #[test]
    fn a_number_is_heard_once_late_ones_within_the_window_too() {
        let mut h = Heard::after(9);
        assert!(!h.first(9), "handed out before the connection");
        assert!(!h.first(1));
        assert!(h.first(10));
        assert!(!h.first(10));
        assert!(h.first(12));
        assert!(h.first(11), "committed out of order");
        assert!(!h.first(11));
        assert!(h.first(12 + WINDOW - 1));
        assert!(!h.first(12), "below the window now");
        assert!(h.first(13), "within it, never heard");
        assert!(h.first(5 * WINDOW), "a jump clears the window");
        assert!(!h.first(5 * WINDOW));
        assert!(h.first(5 * WINDOW - 1));
        // A made-up number far ahead is believed once and not recorded.
        assert!(h.first(i64::MAX));
        assert!(h.first(5 * WINDOW + 1), "real numbers still count");
        assert!(!h.first(5 * WINDOW + 1));
        assert!(!h.first(0) && !h.first(i64::MIN));
    }
}
