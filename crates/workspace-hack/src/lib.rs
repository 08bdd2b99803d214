//! Not called: the union of the features every workspace crate asks of its dependencies, which
//! each crate depends on, so that a build of any one of them (`cargo test -p sluice-core`, an
//! editor's) resolves every dependency as the workspace build does and reuses its compiles.
//! `cargo hakari generate` writes its manifest.
