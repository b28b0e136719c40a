# elfutils' libdw (libdwfl) for native frames' source file and line: the header, and the shared
# objects libdw.so.1 and libelf.so.1 that the install tree bundles next to the preload, which
# dlopen()s them when a report is written (src/interpret/source_lines.h). Optional: without it,
# native frames keep their function and module offset.
#   Libdw_INCLUDE_DIR, Libdw_SHARED_OBJECT, Libelf_SHARED_OBJECT (real files, symlinks resolved)
find_path(Libdw_INCLUDE_DIR NAMES elfutils/libdwfl.h)
find_library(Libdw_LIBRARY NAMES libdw.so.1 dw)
find_library(Libelf_LIBRARY NAMES libelf.so.1 elf)
if(Libdw_LIBRARY AND Libelf_LIBRARY)
  get_filename_component(Libdw_SHARED_OBJECT "${Libdw_LIBRARY}" REALPATH)
  get_filename_component(Libelf_SHARED_OBJECT "${Libelf_LIBRARY}" REALPATH)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libdw REQUIRED_VARS Libdw_INCLUDE_DIR Libdw_SHARED_OBJECT Libelf_SHARED_OBJECT)
mark_as_advanced(Libdw_INCLUDE_DIR Libdw_LIBRARY Libelf_LIBRARY)
