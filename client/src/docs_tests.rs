//! The docs' copies of compiled code stay equal to the code.

/// docs/client.md's "Getting started" shows `examples/getting_started.rs`, which the test suite
/// builds: the copy must be the file, byte for byte.
#[test]
fn getting_started_is_the_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let md = std::fs::read_to_string(format!("{root}/../docs/client.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}/examples/getting_started.rs")).unwrap();
    let section =
        md.split("\n## Getting started\n").nth(1).expect("docs/client.md has a Getting started section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let code = section
        .split("\n```rust\n")
        .nth(1)
        .and_then(|c| c.split("\n```\n").next())
        .expect("a rust code block in Getting started");
    assert_eq!(
        format!("{code}\n"),
        example,
        "docs/client.md's Getting started differs from client/examples/getting_started.rs: copy the file into it"
    );
}

/// docs/agents.md shows `examples/agent.rs`, which the test suite builds, byte for byte.
#[test]
fn the_agent_guide_shows_the_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let md = std::fs::read_to_string(format!("{root}/../docs/agents.md")).unwrap();
    let example = std::fs::read_to_string(format!("{root}/examples/agent.rs")).unwrap();
    let code = md
        .split("\n```rust\n")
        .nth(1)
        .and_then(|c| c.split("\n```\n").next())
        .expect("a rust code block in docs/agents.md");
    assert_eq!(
        format!("{code}\n"),
        example,
        "docs/agents.md differs from client/examples/agent.rs: copy the file into it"
    );
}
