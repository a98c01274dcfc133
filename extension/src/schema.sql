COMMENT ON SCHEMA rendezvous IS 'pg_rendezvous: rendezvous dispatch, admission, leader and firing claims';
