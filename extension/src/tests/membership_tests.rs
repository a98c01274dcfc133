//! Membership inside one transaction: heartbeat, leave, live set, winner over it.
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn heartbeat_joins_and_leave_removes() {
        Spi::run("SELECT rendezvous.heartbeat('b'), rendezvous.heartbeat('a', 2), rendezvous.heartbeat('c')")
            .unwrap();
        assert_eq!(
            Spi::get_one::<Vec<String>>("SELECT rendezvous.live_hosts()"),
            Ok(Some(vec!["a".into(), "b".into(), "c".into()]))
        );
        assert_eq!(
            Spi::get_one::<bool>(
                "SELECT rendezvous.winner('k1') = rendezvous.winner('k1', ARRAY['a','b','c'], ARRAY[2,1,1]::float8[])"
            ),
            Ok(Some(true))
        );
        assert_eq!(Spi::get_one::<bool>("SELECT rendezvous.leave('b')"), Ok(Some(true)));
        assert_eq!(Spi::get_one::<bool>("SELECT rendezvous.leave('b')"), Ok(Some(false)));
        assert_eq!(
            Spi::get_one::<Vec<String>>("SELECT rendezvous.live_hosts()"),
            Ok(Some(vec!["a".into(), "c".into()]))
        );
    }

    #[pg_test]
    fn stale_hosts_are_not_live() {
        Spi::run("SELECT rendezvous.heartbeat('old'), rendezvous.heartbeat('new')").unwrap();
        // Age one heartbeat on the database clock, as if the host had stopped a minute ago.
        Spi::run(
            "UPDATE rendezvous.hosts SET last_seen = last_seen - interval '1 minute' WHERE host_id = 'old'",
        )
        .unwrap();
        assert_eq!(
            Spi::get_one::<Vec<String>>("SELECT rendezvous.live_hosts()"),
            Ok(Some(vec!["new".into()]))
        );
        assert_eq!(
            Spi::get_one::<Vec<String>>("SELECT rendezvous.live_hosts('2 minutes')"),
            Ok(Some(vec!["new".into(), "old".into()]))
        );
        assert_eq!(Spi::get_one::<String>("SELECT rendezvous.winner('any')"), Ok(Some("new".into())));
    }

    #[pg_test]
    fn empty_live_set_has_no_winner() {
        assert_eq!(Spi::get_one::<String>("SELECT rendezvous.winner('k')"), Ok(None));
        assert_eq!(Spi::get_one::<i32>("SELECT cardinality(rendezvous.ranked('k', 3))"), Ok(Some(0)));
    }

    #[pg_test(error = "host_id must not be empty")]
    fn empty_host_id_is_an_error() {
        Spi::run("SELECT rendezvous.heartbeat('')").unwrap();
    }
}
