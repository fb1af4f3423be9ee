// What the hooks tell the process's lifecycle (lifecycle_process.cc) while the job runs.
#pragma once

namespace cusnap::shim {

/// After a tracked allocation was created: in CUSNAP_CARRIER=eager mode the host carrier
/// grows in the background toward the bytes the sharing table now tracks, so a checkpoint
/// finds its host memory already provided (DRIVER-FACTS "Speeds"). Lazy mode: nothing.
void AnticipateCarrier();

}  // namespace cusnap::shim
