//! Announcements hosts can trust: the wake-ups the extension sends on its channels
//! (`rendezvous_runs`, `rendezvous_firings`, `rendezvous_cancel`, `rendezvous_leader`) carry a
//! number from a sequence and a MAC under the install's key, which only the owner and
//! `rendezvous_host` read. Any role can `NOTIFY` any channel; a host ignores a payload whose MAC
//! does not hold or whose number it has seen, so a forged or replayed wake-up costs it a hash
//! and no look at the database (0.3.0 looked on every one: #39).
//!
//! Payload: `<number>:<mac>:<data>`, the MAC being the hex of
//! SHA-256(key ‖ SHA-256(channel ‖ ':' ‖ number ‖ ':' ‖ data)) (the inner hash has a fixed
//! length, so nothing can be appended to a seen MAC's input). The client checks it in
//! `client/src/announce.rs`; the portable edition builds it in plpgsql (portable/announce.sql).
use std::cell::RefCell;
use std::ffi::{c_char, CString};

use pgrx::pg_sys;
use pgrx::prelude::*;
use sha2::{Digest, Sha256};

use crate::ffi::kept_plan::{FirstRow, KeptPlan};

extension_sql_file!("announce.sql", name = "announce");

/// An announcement sent: the (local transaction, subtransaction) it was sent in, its channel
/// and data.
type Sent = ((u32, u32), String, String);

thread_local! {
    /// The install's key, read once per backend, with the oid of the table it came from (a
    /// database whose extension was made again has a new table and key).
    static KEY: RefCell<Option<(pg_sys::Oid, Vec<u8>)>> = const { RefCell::new(None) };
    static READ_KEY: KeptPlan = const { KeptPlan::new("SELECT k.key FROM rendezvous._announcement_key k", &[]) };
    static NEXT: KeptPlan = const { KeptPlan::new("SELECT pg_catalog.nextval('rendezvous._announcements'::pg_catalog.regclass)", &[]) };
    /// What this (sub)transaction announced already (its ids, channel, data): one
    /// notification per transaction, as a plain NOTIFY's duplicates are folded. (A
    /// subtransaction's, which is gone if it rolls back, is told apart by its id.)
    static SENT: RefCell<Vec<Sent>> = const { RefCell::new(Vec::new()) };
}

/// Sends an announcement on `channel` at commit (the caller runs as the owner: inside the
/// extension's SECURITY DEFINER functions). Not callable by PUBLIC.
#[pg_extern(volatile, parallel_unsafe, name = "_announce")]
fn announce_sql(channel: &str, data: &str) {
    announce(channel, data);
}

/// Sends `data` on `channel` at commit, signed; a database still on 0.3.0's tables (this
/// library installed, `ALTER EXTENSION … UPDATE` not yet run) gets 0.3.0's plain payload.
pub(crate) fn announce(channel: &str, data: &str) {
    // SAFETY: reads this backend's PGPROC and transaction state, inside a transaction.
    let now = unsafe { (local_transaction(), pg_sys::GetCurrentSubTransactionId()) };
    let fresh = SENT.with(|sent| {
        let mut sent = sent.borrow_mut();
        sent.retain(|(x, _, _)| x.0 == now.0);
        if sent.iter().any(|(x, c, d)| *x == now && c == channel && d == data) {
            return false;
        }
        sent.push((now, channel.to_owned(), data.to_owned()));
        true
    });
    if fresh {
        notify(channel, &announcement(channel, data).unwrap_or_else(|| data.to_owned()));
    }
}

/// The signed payload for `data` on `channel`, with the next number; `None` when the
/// database has no key table yet (0.3.0's). Runs statements: inside a transaction.
pub(crate) fn announcement(channel: &str, data: &str) -> Option<String> {
    // SAFETY: syscache lookups by name, inside a transaction (we are called from SQL).
    let table = unsafe {
        let schema = pg_sys::get_namespace_oid(c"rendezvous".as_ptr(), true);
        pg_sys::get_relname_relid(c"_announcement_key".as_ptr(), schema)
    };
    if table == pg_sys::InvalidOid {
        return None;
    }
    let number = Spi::connect(|client| {
        // SAFETY: the statements take no arguments.
        unsafe {
            let cached = KEY.with(|k| k.borrow().as_ref().is_some_and(|(oid, _)| *oid == table));
            if !cached {
                let keys = READ_KEY.with(|p| p.run(client, &[]));
                let one = keys.len() == 1;
                let key = FirstRow::of(keys).filter(|_| one).and_then(|row| row.get::<Vec<u8>>(1));
                let Some(key) = key else {
                    crate::errors::raise(
                        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                        "rendezvous._announcement_key must hold one key: run ALTER EXTENSION pg_rendezvous UPDATE, or make the extension again",
                    );
                };
                KEY.with(|k| *k.borrow_mut() = Some((table, key)));
            }
            FirstRow::of(NEXT.with(|p| p.run(client, &[])))
                .and_then(|row| row.get::<i64>(1))
                .expect("nextval is not NULL")
        }
    });
    KEY.with(|k| k.borrow().as_ref().map(|(_, key)| signed(key, channel, number, data)))
}

/// `<number>:<mac>:<data>`.
pub(crate) fn signed(key: &[u8], channel: &str, number: i64, data: &str) -> String {
    let inner = Sha256::digest(format!("{channel}:{number}:{data}").as_bytes());
    let mut outer = Sha256::new();
    outer.update(key);
    outer.update(inner);
    let mac: String = outer.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{number}:{mac}:{data}")
}

extern "C-unwind" {
    // commands/async.h: queues a notification, sent when the current transaction commits.
    fn Async_Notify(channel: *const c_char, payload: *const c_char);
}

/// Queues a notification (sent at commit).
pub(crate) fn notify(channel: &str, payload: &str) {
    let channel = CString::new(channel).expect("channel names have no NUL");
    let payload = CString::new(payload).expect("text has no NUL bytes");
    // SAFETY: valid C strings; Async_Notify copies them.
    unsafe { Async_Notify(channel.as_ptr(), payload.as_ptr()) }
}

/// This backend's local transaction id (each transaction, read-only ones too, has its own).
unsafe fn local_transaction() -> u32 {
    // SAFETY: MyProc is this backend's PGPROC, set for its life; reading a field of it.
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        {
            (*pg_sys::MyProc).lxid
        }
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        {
            (*pg_sys::MyProc).vxid.lxid
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn an_announcement_is_signed_and_numbered() {
        let a = super::announcement("rendezvous_runs", "").expect("0.4.0's tables");
        let b = super::announcement("rendezvous_runs", "").expect("0.4.0's tables");
        let (na, rest) = a.split_once(':').unwrap();
        let (nb, _) = b.split_once(':').unwrap();
        assert!(nb.parse::<i64>().unwrap() > na.parse::<i64>().unwrap(), "{a} then {b}");
        let key = Spi::get_one::<Vec<u8>>("SELECT key FROM rendezvous._announcement_key").unwrap().unwrap();
        assert_eq!(a, super::signed(&key, "rendezvous_runs", na.parse().unwrap(), ""));
        assert_eq!(rest.len(), 65, "{a}");
    }
}
