# Warnings for our own targets (never for third-party headers, which come in as SYSTEM).
function(oomscope_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)
endfunction()

# Sanitizer flags for the targets that may carry them (tests, the CLI; never the preload's
# production build).
function(oomscope_sanitize target)
  if(OOMSCOPE_SANITIZE)
    string(REPLACE ";" "," _san "${OOMSCOPE_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${_san} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${_san})
  endif()
endfunction()
