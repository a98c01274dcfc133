-- The portable edition, 0.3.0 -> 0.4.0: what its own helper tables and types need beyond the
-- native migration (sql/migrations/0.3.0--0.4.0.sql, which runs first). sqlgen portable puts
-- both first in pg_rendezvous-0.3.0--0.4.0-portable.sql (and its pg_tle form), then every
-- definition of the 0.4.0 portable script again (extension/portable/README.md).

-- The key of _cron_parsed's MACs (schedule.sql): 0.3.0 trusted a parsed schedule kept in a
-- session setting the caller could SET (#39).
CREATE TABLE rendezvous._cron_key (
    key bytea NOT NULL
);
COMMENT ON TABLE rendezvous._cron_key IS 'Portable edition: the key that authenticates parsed schedules kept in session settings (_cron_parsed).';
INSERT INTO rendezvous._cron_key (key)
SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text
                                        || pg_catalog.clock_timestamp()::text, 'UTF8'::name));
REVOKE ALL ON rendezvous._cron_key FROM PUBLIC;
