//! A claim's lock, seen from inside the backend: the tag try_lead takes (in the lock space SQL
//! cannot name, keyed by this installation's leaders table) is held once however often the
//! holder claims, and one resign gives it back.
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::leader::{held_by_me, lock_tag, LOCK_SPACE};

    #[pg_test]
    fn a_claim_holds_its_tagged_lock_once_and_one_resign_gives_it_back() {
        for _ in 0..3 {
            let (is_leader, epoch) =
                Spi::get_two::<bool, i64>("SELECT is_leader, epoch FROM rendezvous.try_lead('g', 'me')")
                    .unwrap();
            assert_eq!((is_leader, epoch), (Some(true), Some(1)));
        }
        let lock_id = Spi::get_one::<i32>("SELECT lock_id FROM rendezvous.leaders WHERE group_name = 'g'")
            .unwrap()
            .unwrap();
        let leaders_oid =
            Spi::get_one::<pg_sys::Oid>("SELECT 'rendezvous.leaders'::regclass::oid").unwrap().unwrap();
        let tag = lock_tag(lock_id);

        // SQL's advisory lock functions put 1 or 2 there; ours is neither.
        assert_eq!(tag.locktag_field4, LOCK_SPACE);
        assert!(![1, 2].contains(&tag.locktag_field4));
        assert_eq!(tag.locktag_field2, leaders_oid.to_u32());
        assert_eq!(tag.locktag_field3, lock_id as u32);
        assert!(held_by_me(&tag));
        // Held once: a single release would free a stacked lock only partly.
        let held = "SELECT count(*) FROM rendezvous.leader_locks WHERE pid = pg_backend_pid()";
        assert_eq!(Spi::get_one::<i64>(held), Ok(Some(1)));
        assert_eq!(Spi::get_one::<bool>("SELECT rendezvous.resign('g')"), Ok(Some(true)));
        assert!(!held_by_me(&tag));
        assert_eq!(Spi::get_one::<i64>(held), Ok(Some(0)));
        assert_eq!(Spi::get_one::<bool>("SELECT rendezvous.resign('g')"), Ok(Some(false)));
    }
}
