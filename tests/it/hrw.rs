//! The SQL HRW functions and the client's local computation agree; errors reach the client.
use rand::{Rng, SeedableRng};
use rendezvous_client::hrw::HostSet;
use rendezvous_client::{sql, Error};
use rendezvous_tests::TestDb;
use tokio_postgres::error::SqlState;

fn random_string(rng: &mut impl Rng, max_len: usize) -> String {
    let len = rng.random_range(0..=max_len);
    (0..len)
        .map(|_| match rng.random_range(0..10) {
            0 => char::from_u32(rng.random_range(0x80..0x800)).unwrap(),
            1 => '🦀',
            _ => rng.random_range('a'..='z'),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn sql_and_client_agree_on_random_keys_and_host_sets() {
    let db = TestDb::new("hrw_agree").await;
    let client = db.connect().await;
    rendezvous_client::check_extension(&client).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut checked = 0;
    for _ in 0..100 {
        let n = rng.random_range(1..40);
        let mut hosts: Vec<String> = (0..n).map(|_| format!("h-{}", random_string(&mut rng, 12))).collect();
        hosts.sort();
        hosts.dedup();
        let weights: Vec<f64> = hosts.iter().map(|_| rng.random_range(0.01..50.0)).collect();
        // The unweighted call also gets repeats, in another order: they must not matter.
        let mut shuffled = hosts.clone();
        shuffled.extend(hosts.iter().take(3).cloned());
        shuffled.reverse();
        let keys: Vec<String> = (0..100).map(|_| random_string(&mut rng, 40)).collect();
        let rows = client
            .query(
                "SELECT rendezvous.winner(k, $4), rendezvous.winner(k, $2, $3),
                        rendezvous.ranked(k, $4, 3)
                   FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i) ORDER BY i",
                &[&keys, &hosts, &weights, &shuffled],
            )
            .await
            .unwrap();
        let plain = HostSet::new(&hosts);
        let weighted = HostSet::weighted(hosts.iter().zip(weights.iter().copied())).unwrap();
        for (key, row) in keys.iter().zip(rows) {
            assert_eq!(row.get::<_, Option<String>>(0).as_deref(), plain.winner(key), "key {key:?}");
            assert_eq!(row.get::<_, Option<String>>(1).as_deref(), weighted.winner(key), "weighted {key:?}");
            assert_eq!(row.get::<_, Vec<String>>(2), plain.ranked(key, Some(3)));
            checked += 1;
        }
    }
    assert_eq!(checked, 10_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn sql_matches_shared_vectors_through_the_client() {
    let db = TestDb::new("hrw_vectors").await;
    let client = db.connect().await;
    let v = rendezvous_hrw::vectors::load();
    for r in &v.winners {
        let row = client.query_one(sql::WINNER, &[&r.key, &r.hosts]).await.unwrap();
        assert_eq!(row.get::<_, Option<String>>(0).as_ref(), r.ranked.first());
        let local = HostSet::new(&r.hosts);
        assert_eq!(local.ranked(&r.key, None), r.ranked);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_a_sqlstate_not_a_crash() {
    let db = TestDb::new("hrw_bad").await;
    let client = db.connect().await;
    let cases: &[(&str, SqlState)] = &[
        ("SELECT rendezvous.winner(NULL, ARRAY['a'])", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.ranked(NULL, ARRAY['a'])", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.score('k', NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.ranked('k', ARRAY['a'], -1)", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.winner('k', ARRAY['a'], ARRAY[0]::float8[])", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.winner('k', ARRAY['a'], ARRAY[-2]::float8[])", SqlState::INVALID_PARAMETER_VALUE),
        (
            "SELECT rendezvous.winner('k', ARRAY['a'], ARRAY['NaN']::float8[])",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "SELECT rendezvous.winner('k', ARRAY['a'], ARRAY['Infinity']::float8[])",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "SELECT rendezvous.winner('k', ARRAY['a'], ARRAY['-Infinity']::float8[])",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "SELECT rendezvous.winner('k', ARRAY['a','b'], ARRAY[1]::float8[])",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "SELECT rendezvous.winner('k', ARRAY['a','a'], ARRAY[1,2]::float8[])",
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "SELECT rendezvous.winner('k', ARRAY['a'], ARRAY[NULL]::float8[])",
            SqlState::NULL_VALUE_NOT_ALLOWED,
        ),
        ("SELECT rendezvous.winner('k', ARRAY['a'], NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.heartbeat(NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
        ("SELECT rendezvous.heartbeat('')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.heartbeat(repeat('x', 257))", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.heartbeat('h', 'NaN')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.heartbeat('h', 0)", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.live_hosts('-1 s')", SqlState::INVALID_PARAMETER_VALUE),
        ("SELECT rendezvous.live_hosts(NULL)", SqlState::NULL_VALUE_NOT_ALLOWED),
    ];
    for (query, code) in cases {
        let err = client.query(*query, &[]).await.expect_err(query);
        assert_eq!(err.code(), Some(code), "{query}: {err:?}");
    }
    // The backend survived every one of them.
    assert_eq!(client.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0), 1);
    // The largest host array a call takes is fine; one more host is refused with 54000, and the
    // backend goes on.
    let mut hosts: Vec<String> = (0..100_000).map(|i| format!("host-{i}")).collect();
    let row = client.query_one(sql::WINNER, &[&"big", &hosts]).await.unwrap();
    assert_eq!(row.get::<_, Option<String>>(0).as_deref(), HostSet::new(&hosts).winner("big"));
    hosts.push("one-too-many".into());
    let err = client.query_one(sql::WINNER, &[&"big", &hosts]).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::PROGRAM_LIMIT_EXCEEDED), "{err}");
    assert_eq!(client.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_extension_says_what_to_run() {
    let db = TestDb::bare("no_ext").await;
    let client = db.connect().await;
    let err = rendezvous_client::check_extension(&client).await.unwrap_err();
    assert!(matches!(err, Error::ExtensionMissing));
    assert!(err.to_string().contains("CREATE EXTENSION pg_rendezvous"), "{err}");
    let err = rendezvous_client::membership::heartbeat(&client, "h1", 1.0).await.unwrap_err();
    assert!(matches!(err, Error::ExtensionMissing), "{err:?}");
}
