-- Shared by the suites that follow (they run in order in one database).
-- regress.err() runs a statement and shows its SQLSTATE and message instead of failing the script.
CREATE SCHEMA regress;
CREATE FUNCTION regress.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
GRANT USAGE ON SCHEMA regress TO PUBLIC;
