//! Memory a call cannot have is an ERROR (53200), not an abort of the backend.
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// More than this machine has: PostgreSQL refuses it, and the call fails with 53200 where
    /// a Rust allocation of it would have aborted the process.
    #[pg_test(error = "out of memory: a test needs 70368744177664 bytes")]
    fn memory_that_cannot_be_had_is_an_error() {
        crate::errors::ensure_memory(1 << 46, "a test");
    }

    /// What a host set of the largest accepted input asks for is granted on an ordinary
    /// machine, and the probe leaves nothing allocated behind.
    #[pg_test]
    fn the_largest_host_set_is_granted() {
        crate::errors::ensure_memory(
            2 * crate::hrw::MAX_HOSTS_BYTES + crate::hrw::MAX_HOSTS * 64,
            "the host set",
        );
        assert!(Spi::get_one::<bool>("SELECT rendezvous.winner('k', ARRAY['a', 'b']) IS NOT NULL")
            .unwrap()
            .unwrap());
    }
}
