/* oomscope public C API. Declared by the preloaded liboomscope.so; every function is safe to
 * call from any thread, never throws and never aborts the program. Resolve the functions with
 * dlsym(RTLD_DEFAULT, "oomscope_dump") when the program may run without the preload. */
#ifndef OOMSCOPE_OOMSCOPE_H
#define OOMSCOPE_OOMSCOPE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Writes a report now (trigger "request"). reason: free text kept in the report's trigger
 * message, may be NULL. Returns the path written, or "" when no report could be written
 * (one notice on stderr says why). The string stays valid until the next call on the same
 * thread. */
const char* oomscope_dump(const char* reason);

/* The library's version, "MAJOR.MINOR.PATCH". */
const char* oomscope_version(void);

#ifdef __cplusplus
}
#endif

#endif /* OOMSCOPE_OOMSCOPE_H */
