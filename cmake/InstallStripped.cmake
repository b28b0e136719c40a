# install(CODE) helper: installs a binary stripped, with its debug information in a file of its
# own under <prefix>/lib/debug/.build-id/xx/yyyy.debug (where gdb, and oomscope's symbolizer for
# the programs it reads, look for it by build id) and a .gnu_debuglink to it.
#   oomscope_install_stripped(SOURCE DESTINATION_DIR NAME PART WORK_DIR)
# PART: "runtime" installs the stripped binary; "debug" installs the debug file. Each part can
# be installed alone (CPack's components: the Debian package and its -dbg package). file(INSTALL)
# adds $DESTDIR itself.
function(oomscope_install_stripped source destination name part work)
  set(root "${CMAKE_INSTALL_PREFIX}")
  execute_process(COMMAND readelf -n "${source}" OUTPUT_VARIABLE notes RESULT_VARIABLE rc)
  string(REGEX MATCH "Build ID: ([0-9a-f]+)" found "${notes}")
  set(id "${CMAKE_MATCH_1}")
  if(NOT rc EQUAL 0 OR NOT id)
    message(FATAL_ERROR "${source} has no build id (readelf -n)")
  endif()
  string(SUBSTRING "${id}" 0 2 head)
  string(SUBSTRING "${id}" 2 -1 tail)
  set(debug_dir "${root}/lib/debug/.build-id/${head}")
  set(work "${work}/${name}")
  file(MAKE_DIRECTORY "${work}")
  execute_process(COMMAND objcopy --only-keep-debug --compress-debug-sections "${source}" "${work}/${tail}.debug"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "objcopy --only-keep-debug ${source} failed")
  endif()
  if(part STREQUAL "debug")
    file(INSTALL "${work}/${tail}.debug" DESTINATION "${debug_dir}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
    return()
  endif()
  # The stripped copy: symbols the loader needs stay (.dynsym); the link names the debug file by
  # its base name and checksum.
  execute_process(COMMAND strip --strip-debug --strip-unneeded -o "${work}/${name}" "${source}" RESULT_VARIABLE rc1)
  execute_process(COMMAND objcopy "--add-gnu-debuglink=${work}/${tail}.debug" "${work}/${name}" RESULT_VARIABLE rc2)
  if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
    message(FATAL_ERROR "stripping ${source} failed")
  endif()
  file(INSTALL "${work}/${name}" DESTINATION "${root}/${destination}" USE_SOURCE_PERMISSIONS)
endfunction()
