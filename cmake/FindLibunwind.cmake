# libunwind (nongnu) for local unwinding: the header, and the shared object libunwind.so.8
# that the install tree bundles next to the preload (which dlopen()s it; see
# src/track/backtrace.h for why it is never a DT_NEEDED).
#   Libunwind_INCLUDE_DIR, Libunwind_SHARED_OBJECT (the real file, symlinks resolved)
find_path(Libunwind_INCLUDE_DIR NAMES libunwind.h PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE})
find_library(Libunwind_LIBRARY NAMES libunwind.so.8 unwind)
if(Libunwind_LIBRARY)
  get_filename_component(Libunwind_SHARED_OBJECT "${Libunwind_LIBRARY}" REALPATH)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libunwind REQUIRED_VARS Libunwind_INCLUDE_DIR Libunwind_SHARED_OBJECT)
mark_as_advanced(Libunwind_INCLUDE_DIR Libunwind_LIBRARY)
