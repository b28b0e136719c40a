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

/* A training-step boundary: a timeline event and a sample of each device's memory. state:
 * NULL, or the framework's counters in the line protocol of src/track/framework_state.h. */
void oomscope_step(const char* state);

/* A labelled marker in the timeline (a phase of the program: "eval", "checkpoint"…). */
void oomscope_mark(const char* label);

/* For framework adapters (the PyTorch adapter calls these; programs need not).
 * attach: the framework is present; reports_oom != 0 when it will call
 * oomscope_framework_oom for each out-of-memory error it raises, which then writes the one
 * report of that OOM (its own allocations failing in CUDA no longer write one). Returns 1. */
int oomscope_framework_attach(const char* name, int reports_oom);

/* The framework raised an out-of-memory error for `requested` bytes on `device`; state is its
 * allocator's view (line protocol). Writes the OOM report; returns its path or "". */
const char* oomscope_framework_oom(const char* name, int device, unsigned long long requested, const char* state);

/* A report on request (as oomscope_dump) with the framework's allocator view `state` (the same
 * line protocol): its allocated and reserved bytes, segments, pools and CUDA graphs in a report
 * written while nothing failed. Returns its path or "". */
const char* oomscope_framework_dump(const char* reason, const char* name, const char* state);

/* 1 when the next out-of-memory episode will get a report of its own, 0 when the reports are
 * used up (OOMSCOPE_MAX_OOM_REPORTS): an adapter then need not gather its allocator's state,
 * and passes NULL to oomscope_framework_oom, which counts the episode. */
int oomscope_oom_report_wanted(void);

/* The most device memory this process held on `device` at once (tracked bytes, every source)
 * since the last oomscope_peak_reset(), or since the start; exact for allocations of 4 MiB or
 * more, otherwise low by less than 4 MiB per allocating thread. 0 without a recorder. */
unsigned long long oomscope_peak(int device);

/* The device memory this process holds on `device` now (tracked bytes). */
unsigned long long oomscope_live(int device);

/* Starts a new peak window on every device (the pytest plugin calls it before each test): the
 * peak above, and the reports' composition of the peak ("At the peak"), count from now. The
 * reports' peak_tracked_bytes stays the peak of the whole run. */
void oomscope_peak_reset(void);

/* Called from Python with the GIL held (`import oomscope` does): oomscope learns the
 * interpreter's frame layout now, so that the program's first allocation made without the GIL
 * (ctypes, CuPy) already gets its Python lines. */
void oomscope_python_prepare(void);

#ifdef __cplusplus
}
#endif

#endif /* OOMSCOPE_OOMSCOPE_H */
