//! Time on a host: its offset from the database's clock (rank delays are timed by it; leases
//! and claims never are), and jitter for waits that many hosts start together.
use std::time::{Duration, SystemTime};

/// How far this host's "now" is from the database's: `now_local + offset ≈ now_db`.
#[derive(Clone, Copy)]
pub(super) struct Offset {
    ahead: bool,
    by: Duration,
}

impl Offset {
    pub(super) fn measure(db_now: SystemTime, local_before: SystemTime, local_after: SystemTime) -> Offset {
        let mid = local_before + local_after.duration_since(local_before).unwrap_or_default() / 2;
        match db_now.duration_since(mid) {
            Ok(d) => Offset { ahead: true, by: d },
            Err(e) => Offset { ahead: false, by: e.duration() },
        }
    }

    /// The database clock now, as this host estimates it.
    pub(super) fn db_now(self) -> SystemTime {
        let now = SystemTime::now();
        if self.ahead {
            now + self.by
        } else {
            now - self.by
        }
    }

    /// The local instant at which the database clock reads `db`.
    pub(super) fn to_local(self, db: SystemTime) -> SystemTime {
        if self.ahead {
            db - self.by
        } else {
            db + self.by
        }
    }
}

/// `d` scaled by a factor in [0.5, 1.5), so reconnecting hosts do not arrive together.
pub(super) fn jittered(d: Duration) -> Duration {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let mixed = u64::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40; // 24 bits
    d.mul_f64(0.5 + mixed as f64 / (1u64 << 24) as f64)
}
