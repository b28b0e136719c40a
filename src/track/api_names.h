// The names of API ids: each hooked CUDA function, "step", the framework's name, and the labels
// of oomscope_mark(). Ids are stable for the life of the process and small (events carry 16
// bits). add() takes a mutex (registration is rare); name() is lock-free and never allocates.
// Every name is also journaled to the flight file, so that a recovered report names its events.
#pragma once

#include "track/ids.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace oomscope::track {

class FlightFile;

class ApiNames {
public:
    static constexpr size_t kMax = 256;

    ApiNames();
    // Journaled to flight from now on. Called before the table is shared.
    void setFlight(FlightFile* flight) noexcept { m_flight = flight; }

    // The id of name (the same id for the same name); ApiId() when the table is full. The
    // name is copied: any string will do.
    ApiId add(const char* name);
    // "unknown" for id 0, ids never given out, and the full table's ApiId().
    const char* name(ApiId id) const noexcept;
    // Every name by id (index 0: "unknown").
    std::vector<std::string> all() const;

private:
    std::atomic<const char*> m_names[kMax] = {};
    std::atomic<uint16_t> m_count{1};
    std::mutex m_mutex;
    FlightFile* m_flight = nullptr;
};

} // namespace oomscope::track
