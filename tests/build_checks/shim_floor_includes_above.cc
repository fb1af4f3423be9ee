// Must not compile with the include root of the shim floor that owns CUSNAP_PROBE_OWN
// (tests/unit/include_roots.cmake): a floor depends only on the floors below it. The floor's
// own header CUSNAP_PROBE_OWN is reachable; CUSNAP_PROBE_ABOVE, a header of the floor just
// above, is not.
#include CUSNAP_PROBE_OWN
#include CUSNAP_PROBE_ABOVE
