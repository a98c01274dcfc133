//! The SQL HRW functions against the shared vectors (loaded in Rust), and the per-call-site
//! host-set cache (a backend-internal mechanism) against the Rust answer row by row.
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn ranked(key: &str, hosts: &[&str]) -> Vec<String> {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        Spi::get_one_with_args::<Vec<String>>("SELECT rendezvous.ranked($1, $2)", &[key.into(), hosts.into()])
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

    /// The per-call-site host-set cache must follow the arguments row by row.
    #[pg_test]
    fn cached_host_sets_follow_changing_arguments() {
        let sets: [&[&str]; 3] = [&["a", "b", "c"], &["a", "b"], &["x", "y", "z", "a"]];
        let weights: [&[f64]; 3] = [&[1.0, 2.0, 3.0], &[5.0, 1.0], &[1.0, 1.0, 1.0, 9.0]];
        let rows = Spi::connect(|client| {
            client
                .select(
                    "SELECT g, rendezvous.winner('key-' || g, h), rendezvous.winner('key-' || g, h, w),
                            rendezvous.ranked('key-' || g, h, 2), rendezvous.ranked('key-' || g, h, w)
                       FROM generate_series(0, 299) g,
                            LATERAL (SELECT CASE g % 3 WHEN 0 THEN ARRAY['a','b','c'] WHEN 1 THEN ARRAY['a','b']
                                                       ELSE ARRAY['x','y','z','a'] END AS h,
                                            CASE g % 3 WHEN 0 THEN ARRAY[1,2,3]::float8[] WHEN 1 THEN ARRAY[5,1]::float8[]
                                                       ELSE ARRAY[1,1,1,9]::float8[] END AS w) x
                      ORDER BY g",
                    None,
                    &[],
                )
                .unwrap()
                .map(|row| {
                    (
                        row.get::<i32>(1).unwrap().unwrap(),
                        row.get::<String>(2).unwrap().unwrap(),
                        row.get::<String>(3).unwrap().unwrap(),
                        row.get::<Vec<String>>(4).unwrap().unwrap(),
                        row.get::<Vec<String>>(5).unwrap().unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(rows.len(), 300);
        for (g, winner, weighted_winner, top2, weighted_ranked) in rows {
            let i = (g % 3) as usize;
            let key = format!("key-{g}");
            let plain = rendezvous_hrw::HostSet::new(sets[i]);
            let weighted =
                rendezvous_hrw::HostSet::weighted(sets[i].iter().copied().zip(weights[i].iter().copied()))
                    .unwrap();
            assert_eq!(Some(winner.as_str()), plain.winner(&key), "row {g}");
            assert_eq!(Some(weighted_winner.as_str()), weighted.winner(&key), "row {g}");
            assert_eq!(top2, plain.ranked(&key, Some(2)), "row {g}");
            assert_eq!(weighted_ranked, weighted.ranked(&key, None), "row {g}");
        }
    }
}
