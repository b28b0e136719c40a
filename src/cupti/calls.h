// The memory functions CUPTI reports, and what one callback says: the table of callback ids
// we enable (memory functions only, never whole domains) and the translation of a callback's
// parameters into an allocation, a free or a VMM step. Pure: no CUPTI call, no recorder, so
// unit tests feed it callback data built by hand.
#pragma once

#include "interpose/hooks.h"
#include "track/event.h"

#include <cupti_callbacks.h>

#include <cstddef>
#include <cstdint>

namespace oomscope::cupti {

enum class Op : uint8_t { Alloc, Free, VmmCreate, VmmRelease, VmmMap, VmmUnmap, Reserve, AddressFree, PoolTrim };

struct CallSpec {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    interpose::HookId hook;  // the hook of the same function: its API name in reports
    Op op;
    track::MemKind kind;
};

// Every callback we enable.
const CallSpec* memoryCallbacks(size_t* count) noexcept;
const CallSpec* findCall(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) noexcept;

// Frees and unmaps are recorded at the call's entry (before the address can be handed out
// again), everything else at its exit (the result is known there).
constexpr bool recordedAtEntry(Op op)
{
    return op == Op::Free || op == Op::VmmRelease || op == Op::VmmUnmap || op == Op::AddressFree;
}

struct Call {
    const CallSpec* spec = nullptr;
    int result = 0;          // exit: the CUresult / cudaError_t
    uint64_t address = 0;    // alloc: the pointer returned; free, map, unmap: the pointer; vmm create/release: the handle
    uint64_t size = 0;       // bytes allocated (pitch × height for pitched allocations), mapped, reserved
    uint64_t requested = 0;  // bytes asked for
    uint64_t stream = 0;
    uint64_t handle = 0;     // map: the physical handle; pool trim: the pool
    int device = -1;         // when the call names it (cuMemCreate's location), else -1
};

// Reads the call's parameters at the site it is recorded at. False: not a site we record.
bool readCall(const CallSpec& spec, const CUpti_CallbackData& data, Call* out) noexcept;

} // namespace oomscope::cupti
