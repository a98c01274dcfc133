-- announce.rs in PL/pgSQL: an announcement numbered from rendezvous._announcements and signed
-- with the install's key, `<number>:<mac>:<data>`, the MAC being the hex of
-- SHA-256(key || SHA-256(channel || ':' || number || ':' || data)). Runs as the owner (inside
-- the extension's SECURITY DEFINER functions); not callable by PUBLIC. Unlike the native
-- edition, a transaction that announces twice sends two notifications.
CREATE FUNCTION rendezvous._announce(channel text, data text) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    number_ bigint := nextval('rendezvous._announcements');
    key_ bytea := (SELECT k.key FROM rendezvous._announcement_key k);
BEGIN
    PERFORM pg_notify(channel, number_ || ':'
        || encode(sha256(key_ || sha256(convert_to(channel || ':' || number_ || ':' || data, 'UTF8'))), 'hex')
        || ':' || data);
END
$$;
