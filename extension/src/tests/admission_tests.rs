//! Admission inside one transaction (concurrency is tested with many connections in tests/).
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn spawn(key: Option<&str>) -> (i64, bool, bool) {
        let row = Spi::get_three_with_args::<i64, bool, bool>(
            "SELECT run_id, created, same_request FROM rendezvous.spawn_run('t', 'wf', '{}', $1)",
            &[key.into()],
        )
        .unwrap();
        (row.0.unwrap(), row.1.unwrap(), row.2.unwrap())
    }

    #[pg_test]
    fn a_key_admits_one_run() {
        let (first, created, _) = spawn(Some("K"));
        assert!(created);
        assert_eq!(spawn(Some("K")), (first, false, true));
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM rendezvous.runs WHERE dispatch_key = 'K'"),
            Ok(Some(1))
        );
    }

    #[pg_test]
    fn no_key_admits_a_run_every_time() {
        let (a, a_created, _) = spawn(None);
        let (b, b_created, _) = spawn(None);
        assert!(a_created && b_created);
        assert_ne!(a, b);
    }

    #[pg_test(error = "dispatch_key must not be empty")]
    fn empty_dispatch_key_is_an_error() {
        spawn(Some(""));
    }
}
