-- pg_rendezvous 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_rendezvous UPDATE TO '0.2.0').
-- Every schema change of 0.2.0, in the order it was made. scripts/test.sh installs 0.1.0 from
-- its frozen script, fills it, runs this, checks the data, and checks that the catalog equals
-- a fresh install of 0.2.0 (pg_test/upgrade/). Frozen once 0.2.0 is released.
\echo Use "ALTER EXTENSION pg_rendezvous UPDATE TO '0.2.0'" to load this file. \quit
