# Include roots, one per target (DESIGN.md, "Parts": dependencies run one way). Sources
# include with the folder as prefix ("common/log.h", "shim/tables/sharing_table.h"), and a
# target's root holds only the folders it may depend on: the shim's root has common/ and
# shim/, never coordinator/ or cli/, so a shim file that includes a coordinator header does
# not build (tests/unit/include_roots.cmake proves it). Each root is a folder of links in
# the build tree, made at configure time.

# cusnap_include_root(<name> <folder under src>...): makes <build>/include_roots/<name>
# with a link per folder (a folder below src/ may be named: "coordinator/record" links only
# that room) and sets CUSNAP_INCLUDE_ROOT_<name> to its path.
function(cusnap_include_root name)
  set(root ${CMAKE_BINARY_DIR}/include_roots/${name})
  file(MAKE_DIRECTORY ${root})
  foreach(folder IN LISTS ARGN)
    cmake_path(GET folder PARENT_PATH parent)
    file(MAKE_DIRECTORY ${root}/${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${folder} ${root}/${folder} SYMBOLIC)
  endforeach()
  set(CUSNAP_INCLUDE_ROOT_${name} ${root} PARENT_SCOPE)
endfunction()

cusnap_include_root(common common)
cusnap_include_root(shim common shim)
cusnap_include_root(coordinator common coordinator)
# The coordinator's rooms, lowest first (DESIGN.md, "Layout"): a room's root holds common/
# and the rooms up to itself, so a room that includes a header of a room above it does not
# build (tests/unit/include_roots.cmake proves it for each room). The face (coordinator.h,
# discovery.cc, status.cc) compiles against the whole coordinator root above.
set(CUSNAP_COORDINATOR_ROOMS proc native record participants images sequences)
set(rooms_so_far "")
foreach(room IN LISTS CUSNAP_COORDINATOR_ROOMS)
  list(APPEND rooms_so_far coordinator/${room})
  cusnap_include_root(coordinator_${room} common ${rooms_so_far})
endforeach()
cusnap_include_root(demo common demo coordinator)
cusnap_include_root(cli common coordinator demo cli)

# The shim's floors, bottom first (src/shim/CMakeLists.txt; DESIGN.md, "Layout"). A floor is a
# folder of src/shim, except `process`: the root's process.h. Each floor compiles against
# <build>/include_roots/shim_<floor>, which holds common/ and, under shim/, quiet_thread.h and
# the floors up to its own (CUSNAP_INCLUDE_ROOT_shim_<floor>): a file that includes a higher
# floor does not build (tests/unit/include_roots.cmake, BuildCheck.shim_floor_*).
set(CUSNAP_SHIM_FLOORS driver tables carrier hold lifecycle endpoint process hooks intercept)
set(_cusnap_floors_so_far)
foreach(floor IN LISTS CUSNAP_SHIM_FLOORS)
  list(APPEND _cusnap_floors_so_far ${floor})
  set(_cusnap_root ${CMAKE_BINARY_DIR}/include_roots/shim_${floor})
  file(MAKE_DIRECTORY ${_cusnap_root}/shim)
  file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/common ${_cusnap_root}/common SYMBOLIC)
  file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/shim/quiet_thread.h ${_cusnap_root}/shim/quiet_thread.h SYMBOLIC)
  foreach(below IN LISTS _cusnap_floors_so_far)
    if(below STREQUAL "process")
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/shim/process.h ${_cusnap_root}/shim/process.h SYMBOLIC)
    else()
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/shim/${below} ${_cusnap_root}/shim/${below} SYMBOLIC)
    endif()
  endforeach()
  set(CUSNAP_INCLUDE_ROOT_shim_${floor} ${_cusnap_root})
endforeach()
