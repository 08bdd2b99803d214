//! What the sandbox's test binaries share.

use std::time::Duration;

use sluice_rerank::ComponentLimits;

/// The default limits with room in time, for tests of anything but the deadline: 5 ms of wall
/// clock can pass on a loaded machine (a build, other tests beside it) before an upload's
/// smoke run or a call has done what the test is about.
pub fn roomy() -> ComponentLimits {
    ComponentLimits {
        deadline: Duration::from_secs(30),
        ..ComponentLimits::default()
    }
}
