// `oomscope metrics`: what the running processes hold, as Prometheus' text exposition format
// (version 0.0.4), from their snapshots (the flight files read without events, as `top` reads
// them). Pure: reports in, text out; the command reads the files and delivers the text.
//
// One `oomscope_` prefix, base units, `_bytes`, `_total` for counters, `_info` for metadata.
// Labels say where the memory is, never which process holds it (no pid: a series must outlive
// a restart and stay bounded): host, job_id (TORCHELASTIC_RUN_ID, else SLURM_JOB_ID), rank,
// local_rank, device and device_uuid (DCGM's exporter labels its series with the UUID too, so
// that a dashboard can join them). Processes whose labels are the same (two processes without a
// rank on one host) are one series: bytes and counters added, peaks the larger.
#pragma once

#include "report/analysis/leaks.h"
#include "report/model.h"

#include <map>
#include <string>
#include <vector>

namespace oomscope::report {

// unreadable: flight files of processes running here that could not be read, by reason
// (interpret::FlightProblem's names), a series each.
std::string renderPrometheus(const std::vector<Report>& snapshots, const std::string& version,
                             const SourceLine& source = {}, const std::map<std::string, uint64_t>& unreadable = {});

} // namespace oomscope::report
