//! Integration tests against a real cluster, through the client. Run by scripts/test.sh.
mod admission;
mod contract;
mod docs;
mod durability;
mod firing;
mod hrw;
mod leader;
mod membership;
mod pool;
mod portable;
mod retention;
mod roles;
mod runs;
mod schedule;
mod signals;
mod steps;
mod sweep;
