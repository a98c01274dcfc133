//! Integration tests against a real cluster, through the client. Run by scripts/test.sh.
mod admission;
mod hrw;
mod leader;
mod membership;
