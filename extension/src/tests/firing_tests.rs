//! Firing claims inside one transaction (races are tested with many connections in tests/).
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn the_same_instant_is_the_same_firing() {
        assert_eq!(
            Spi::get_one::<bool>(
                "SELECT rendezvous.firing_key('t', '2026-11-29 01:00:00+01')
                      = rendezvous.firing_key('t', '2026-11-28 19:00:00.000000-05')"
            ),
            Ok(Some(true))
        );
        assert_eq!(
            Spi::get_one::<String>("SELECT rendezvous.firing_key('t', '2026-11-29 00:00:00.5+00')"),
            Ok(Some("firing:t:2026-11-29T00:00:00.500000Z".into()))
        );
    }

    #[pg_test]
    fn claim_complete_and_never_again() {
        let claim = |host: &str| {
            Spi::get_two_with_args::<bool, i64>(
                "SELECT claimed, token FROM rendezvous.claim_firing('job', '2026-11-29 00:00+00', $1)",
                &[host.into()],
            )
            .unwrap()
        };
        assert_eq!(claim("a"), (Some(true), Some(1)));
        assert_eq!(claim("b"), (Some(false), Some(1)));
        assert_eq!(
            Spi::get_one::<bool>("SELECT rendezvous.complete_firing('job', '2026-11-29 00:00+00', 1)"),
            Ok(Some(true))
        );
        assert_eq!(claim("b"), (Some(false), Some(1)));
    }

    #[pg_test(error = "fire_at must be finite (got infinity)")]
    fn infinite_fire_at_is_an_error() {
        Spi::run("SELECT * FROM rendezvous.claim_firing('t', 'infinity', 'h')").unwrap();
    }
}
