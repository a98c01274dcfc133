-- announce.rs in PL/pgSQL: an announcement numbered from rendezvous._announcements and signed
-- with the install's key, `<number>:<mac>:<data>`, the MAC being the hex of
-- SHA-256(key || SHA-256(channel || ':' || number || ':' || data)). Runs as the owner (inside
-- the extension's SECURITY DEFINER functions); not callable by PUBLIC. Unlike the native
-- edition, a transaction that announces twice sends two notifications.
-- A MAC under `key`: the hex of SHA-256(key || SHA-256(message)) (the inner hash has a fixed
-- length, so nothing can be appended to a known MAC's input). Announcements use it, and
-- _cron_parsed (schedule.sql) for the parses it keeps, each under its own key.
CREATE FUNCTION rendezvous._mac(key bytea, message text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT encode(sha256(key || sha256(convert_to(message, 'UTF8'))), 'hex') $$;

CREATE FUNCTION rendezvous._announce(channel text, data text) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    number_ bigint := nextval('rendezvous._announcements');
    key_ bytea := (SELECT k.key FROM rendezvous._announcement_key k);
BEGIN
    PERFORM pg_notify(channel, number_ || ':' || rendezvous._mac(key_, channel || ':' || number_ || ':' || data)
        || ':' || data);
END
$$;
