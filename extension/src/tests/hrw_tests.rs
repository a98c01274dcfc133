//! The SQL HRW functions against the shared vectors and their invariants.
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn ranked(key: &str, hosts: &[&str]) -> Vec<String> {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        Spi::get_one_with_args::<Vec<String>>(
            "SELECT rendezvous.ranked($1, $2)",
            &[key.into(), hosts.into()],
        )
        .unwrap()
        .unwrap()
    }

    #[pg_test]
    fn sql_matches_shared_vectors() {
        let v = rendezvous_hrw::vectors::load();
        assert_eq!(
            Spi::get_one::<String>("SELECT rendezvous.hrw_algorithm()").unwrap().as_deref(),
            Some(v.algorithm.as_str())
        );
        for s in &v.scores {
            let got = Spi::get_one_with_args::<i64>(
                "SELECT rendezvous.score($1, $2)",
                &[s.key.as_str().into(), s.host.as_str().into()],
            )
            .unwrap()
            .unwrap();
            assert_eq!(got.to_string(), s.score, "score {s:?}");
        }
        for r in &v.winners {
            let winner = Spi::get_one_with_args::<String>(
                "SELECT rendezvous.winner($1, $2)",
                &[r.key.as_str().into(), r.hosts.clone().into()],
            )
            .unwrap();
            assert_eq!(winner.as_ref(), r.ranked.first(), "winner {r:?}");
            let hosts: Vec<&str> = r.hosts.iter().map(String::as_str).collect();
            assert_eq!(ranked(&r.key, &hosts), r.ranked, "ranked {r:?}");
        }
        for r in &v.weighted {
            let weights = r.weights.clone().unwrap();
            let winner = Spi::get_one_with_args::<String>(
                "SELECT rendezvous.winner($1, $2, $3)",
                &[r.key.as_str().into(), r.hosts.clone().into(), weights.clone().into()],
            )
            .unwrap();
            assert_eq!(winner.as_ref(), r.ranked.first(), "weighted winner {r:?}");
            let all = Spi::get_one_with_args::<Vec<String>>(
                "SELECT rendezvous.ranked($1, $2, $3)",
                &[r.key.as_str().into(), r.hosts.clone().into(), weights.into()],
            )
            .unwrap()
            .unwrap();
            assert_eq!(all, r.ranked, "weighted ranked {r:?}");
        }
    }

    #[pg_test]
    fn order_duplicates_and_nulls_do_not_matter() {
        let same = Spi::get_one::<bool>(
            "SELECT bool_and(
                 rendezvous.winner(k, ARRAY['a','b','c','d'])
                   = rendezvous.winner(k, ARRAY[NULL,'d','c',NULL,'b','a','a','d'])
             AND rendezvous.ranked(k, ARRAY['a','b','c','d'])
                   = rendezvous.ranked(k, ARRAY['d',NULL,'b','c','a','b']))
               FROM generate_series(1, 2000) g, LATERAL (SELECT 'key-' || g AS k) x",
        );
        assert_eq!(same, Ok(Some(true)));
    }

    #[pg_test]
    fn empty_sets_give_null() {
        assert_eq!(Spi::get_one::<String>("SELECT rendezvous.winner('k', '{}'::text[])"), Ok(None));
        assert_eq!(
            Spi::get_one::<String>("SELECT rendezvous.winner('k', ARRAY[NULL, NULL]::text[])"),
            Ok(None)
        );
        assert_eq!(Spi::get_one::<String>("SELECT rendezvous.winner('k', NULL::text[])"), Ok(None));
        assert_eq!(
            Spi::get_one::<i32>("SELECT cardinality(rendezvous.ranked('k', '{}'::text[]))"),
            Ok(Some(0))
        );
    }

    #[pg_test]
    fn equal_weights_equal_unweighted() {
        let same = Spi::get_one::<bool>(
            "SELECT bool_and(rendezvous.winner(k, h) = rendezvous.winner(k, h, array_fill(3.5::float8, ARRAY[cardinality(h)])))
               FROM generate_series(1, 10000) g,
                    LATERAL (SELECT 'k' || g AS k, ARRAY(SELECT 'h' || i FROM generate_series(1, 1 + g % 17) i) AS h) x",
        );
        assert_eq!(same, Ok(Some(true)));
    }

    #[pg_test(error = "key must not be NULL")]
    fn null_key_is_an_error() {
        Spi::get_one::<String>("SELECT rendezvous.winner(NULL, ARRAY['a'])").unwrap();
    }

    #[pg_test(error = "weight -1 of host \"b\" is invalid: weights must be finite and greater than 0")]
    fn negative_weight_is_an_error() {
        Spi::get_one::<String>("SELECT rendezvous.winner('k', ARRAY['a','b'], ARRAY[1,-1]::float8[])")
            .unwrap();
    }

    #[pg_test(error = "hosts and weights must have the same length (got 2 hosts and 1 weights)")]
    fn weight_length_mismatch_is_an_error() {
        Spi::get_one::<String>("SELECT rendezvous.winner('k', ARRAY['a','b'], ARRAY[1]::float8[])")
            .unwrap();
    }
}
