//! Leader claims inside one session (two sessions are tested in tests/ and pg_test/specs/).
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn repeated_claims_are_idempotent_and_one_resign_releases() {
        for _ in 0..3 {
            let (is_leader, epoch) =
                Spi::get_two::<bool, i64>("SELECT is_leader, epoch FROM rendezvous.try_lead('g', 'me')")
                    .unwrap();
            assert_eq!((is_leader, epoch), (Some(true), Some(1)));
        }
        let held = "SELECT count(*) FROM rendezvous.leader_locks WHERE pid = pg_backend_pid()";
        assert_eq!(Spi::get_one::<i64>(held), Ok(Some(1)));
        assert_eq!(Spi::get_one::<bool>("SELECT rendezvous.resign('g')"), Ok(Some(true)));
        assert_eq!(Spi::get_one::<i64>(held), Ok(Some(0)));
        assert_eq!(Spi::get_one::<bool>("SELECT rendezvous.resign('g')"), Ok(Some(false)));
    }

    #[pg_test(error = "candidate must not be empty")]
    fn empty_candidate_is_an_error() {
        Spi::run("SELECT * FROM rendezvous.try_lead('g', '')").unwrap();
    }
}
