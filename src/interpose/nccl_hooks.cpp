// Wrappers of NCCL's communicator calls (libnccl.so.2): each runs the real call and records,
// in the recorder's NCCL table (track/nccl_table.h), the window of time in which NCCL may
// allocate for a communicator: its init or split, its first collective (NCCL connects buffers
// at first use), a registration; and the ranges of ncclMemAlloc's symmetric memory. They never
// take the hooks' reentrancy scope: what NCCL allocates inside must be recorded as usual. A
// collective costs one relaxed load once every communicator had its first.
#include "interpose/hooks.h"
#include "interpose/recording.h"
#include "track/fast_clock.h"
#include "track/hash.h"

#include <cstring>

namespace oi = oomscope::interpose;
using oi::HookId;
using oomscope::track::eventNs;
using oomscope::track::NcclPhase;
using oomscope::track::NcclTable;
using oomscope::track::Recorder;

namespace {

// ncclGroupStart/End nest per thread; windows opened inside a group end at its outermost
// ncclGroupEnd, where NCCL does the group's work.
struct Group {
    int depth = 0;
    int pending = 0;
    uint32_t windows[32];
};
thread_local Group t_group __attribute__((tls_model("initial-exec")));

NcclTable* table() noexcept
{
    if (!oi::enabled())
        return nullptr;
    Recorder* r = oi::recorder();
    return r ? &r->nccl() : nullptr;
}

void settle(NcclTable* t, uint32_t window) noexcept
{
    if (window == NcclTable::kNone)
        return;
    if (t_group.depth > 0 && t_group.pending < int(sizeof(t_group.windows) / sizeof(t_group.windows[0])))
        t_group.windows[t_group.pending++] = window;
    else
        t->closeWindow(window, eventNs());
}

uint64_t handleOf(ncclComm_t comm) noexcept
{
    return uint64_t(reinterpret_cast<uintptr_t>(comm));
}

uint64_t idOf(const ncclUniqueId* ids, int n) noexcept
{
    uint64_t h = 0;
    for (int i = 0; i < n; ++i) {
        uint64_t words[NCCL_UNIQUE_ID_BYTES / 8];
        std::memcpy(words, ids[i].internal, sizeof(words));
        h = oomscope::track::mix64(h ^ oomscope::track::hashWords(words, NCCL_UNIQUE_ID_BYTES / 8));
    }
    return h;
}

// A communicator's rank and size from NCCL itself, where the call does not give them.
void askNccl(ncclComm_t comm, int* rank, int* nranks) noexcept
{
    using Query = ncclResult_t (*)(const ncclComm_t, int*);
    static const auto userRank = reinterpret_cast<Query>(oi::auxFunction(oi::Family::Nccl, "ncclCommUserRank"));
    static const auto count = reinterpret_cast<Query>(oi::auxFunction(oi::Family::Nccl, "ncclCommCount"));
    int value = -1;
    if (userRank && userRank(comm, &value) == ncclSuccess)
        *rank = value;
    if (count && count(comm, &value) == ncclSuccess)
        *nranks = value;
}

struct Begun {
    uint32_t comm = NcclTable::kNone;
    uint32_t window = NcclTable::kNone;
};

Begun beginComm(NcclTable* t) noexcept
{
    Begun b;
    if (t)
        b.comm = t->beginComm(eventNs(), oi::currentDevice(oi::Family::Driver), &b.window);
    return b;
}

// After an init or split: the communicator's facts; a non-blocking one (ncclInProgress) keeps
// its window open until its first collective.
void endComm(NcclTable* t, const Begun& b, ncclResult_t rc, ncclComm_t comm, uint64_t id, uint64_t parent, int rank,
             int nranks) noexcept
{
    if (!t || b.comm == NcclTable::kNone)
        return;
    if ((rc != ncclSuccess && rc != ncclInProgress) || !comm) {
        t->commFailed(b.comm);
        t->closeWindow(b.window, eventNs());
        return;
    }
    if (rc == ncclSuccess && (rank < 0 || nranks <= 0))
        askNccl(comm, &rank, &nranks);
    t->commCreated(b.comm, handleOf(comm), id, parent, oi::currentDevice(oi::Family::Driver), rank, nranks);
    if (rc == ncclSuccess)
        settle(t, b.window);
}

// Before a collective: the window of the communicator's first, when this is it.
uint32_t firstUse(NcclTable*& t, ncclComm_t comm) noexcept
{
    t = table();
    if (!t || !t->awaitingFirst())
        return NcclTable::kNone;
    return t->firstCollective(handleOf(comm), eventNs());
}

} // namespace

OOMSCOPE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank)
{
    const auto real = oi::realFn<HookId::ncclCommInitRank>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    const Begun b = beginComm(t);
    const ncclResult_t rc = real(comm, nranks, commId, rank);
    endComm(t, b, rc, comm ? *comm : nullptr, idOf(&commId, 1), 0, rank, nranks);
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                    ncclConfig_t* config)
{
    const auto real = oi::realFn<HookId::ncclCommInitRankConfig>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    const Begun b = beginComm(t);
    const ncclResult_t rc = real(comm, nranks, commId, rank, config);
    endComm(t, b, rc, comm ? *comm : nullptr, idOf(&commId, 1), 0, rank, nranks);
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                      ncclUniqueId* commIds, ncclConfig_t* config)
{
    const auto real = oi::realFn<HookId::ncclCommInitRankScalable>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    const Begun b = beginComm(t);
    const ncclResult_t rc = real(newcomm, nranks, myrank, nId, commIds, config);
    endComm(t, b, rc, newcomm ? *newcomm : nullptr, commIds && nId > 0 ? idOf(commIds, nId) : 0, 0, myrank, nranks);
    return rc;
}

// One process, ndev communicators at once: their windows coincide, so what NCCL allocates in
// them is shared (a report says so rather than guess).
OOMSCOPE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist)
{
    const auto real = oi::realFn<HookId::ncclCommInitAll>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    constexpr int kMost = 64;
    Begun begun[kMost];
    const int watched = t && ndev > 0 ? (ndev < kMost ? ndev : kMost) : 0;
    for (int i = 0; i < watched; ++i) {
        begun[i] = beginComm(t);
        if (begun[i].comm == NcclTable::kNone)
            break;
    }
    const ncclResult_t rc = real(comm, ndev, devlist);
    const uint64_t id = oomscope::track::mix64(eventNs() ^ 0x6e63636c);  // this process's clique
    for (int i = 0; i < watched; ++i)
        endComm(t, begun[i], rc, comm ? comm[i] : nullptr, id, 0, -1, -1);
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                           ncclConfig_t* config)
{
    const auto real = oi::realFn<HookId::ncclCommSplit>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    const Begun b = beginComm(t);
    const ncclResult_t rc = real(comm, color, key, newcomm, config);
    if (t) {
        const uint64_t parentId = t->idOf(t->find(handleOf(comm)));
        endComm(t, b, rc, newcomm ? *newcomm : nullptr, oomscope::track::mix64(parentId ^ uint64_t(uint32_t(color))),
                handleOf(comm), -1, -1);
    }
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    const auto real = oi::realFn<HookId::ncclCommDestroy>();
    if (!real)
        return ncclInternalError;
    if (NcclTable* t = table())
        t->destroyed(handleOf(comm), eventNs());
    return real(comm);
}

OOMSCOPE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    const auto real = oi::realFn<HookId::ncclCommAbort>();
    if (!real)
        return ncclInternalError;
    if (NcclTable* t = table())
        t->destroyed(handleOf(comm), eventNs());
    return real(comm);
}

OOMSCOPE_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size)
{
    const auto real = oi::realFn<HookId::ncclMemAlloc>();
    if (!real)
        return ncclInternalError;
    const ncclResult_t rc = real(ptr, size);
    if (rc == ncclSuccess && ptr && *ptr)
        if (NcclTable* t = table())
            t->memAlloc(uint64_t(reinterpret_cast<uintptr_t>(*ptr)), size, oi::currentDevice(oi::Family::Driver));
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclMemFree(void* ptr)
{
    const auto real = oi::realFn<HookId::ncclMemFree>();
    if (!real)
        return ncclInternalError;
    if (ptr)
        if (NcclTable* t = table())
            t->memFree(uint64_t(reinterpret_cast<uintptr_t>(ptr)));
    return real(ptr);
}

namespace {
uint32_t registration(NcclTable* t, ncclComm_t comm) noexcept
{
    return t ? t->openWindow(t->find(handleOf(comm)), NcclPhase::Registration, eventNs()) : NcclTable::kNone;
}
} // namespace

OOMSCOPE_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle)
{
    const auto real = oi::realFn<HookId::ncclCommRegister>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    const uint32_t window = registration(t, comm);
    const ncclResult_t rc = real(comm, buff, size, handle);
    if (t)
        settle(t, window);
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                    int winFlags)
{
    const auto real = oi::realFn<HookId::ncclCommWindowRegister>();
    if (!real)
        return ncclInternalError;
    NcclTable* t = table();
    const uint32_t window = registration(t, comm);
    const ncclResult_t rc = real(comm, buff, size, win, winFlags);
    if (t)
        settle(t, window);
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclGroupStart(void)
{
    const auto real = oi::realFn<HookId::ncclGroupStart>();
    if (!real)
        return ncclInternalError;
    const ncclResult_t rc = real();
    if (rc == ncclSuccess)
        ++t_group.depth;
    return rc;
}

OOMSCOPE_EXPORT ncclResult_t ncclGroupEnd(void)
{
    const auto real = oi::realFn<HookId::ncclGroupEnd>();
    if (!real)
        return ncclInternalError;
    const ncclResult_t rc = real();
    if (t_group.depth > 0 && --t_group.depth == 0 && t_group.pending > 0) {
        if (NcclTable* t = table())
            for (int i = 0; i < t_group.pending; ++i)
                t->closeWindow(t_group.windows[i], eventNs());
        t_group.pending = 0;
    }
    return rc;
}

#define OOMSCOPE_NCCL_COLLECTIVE(name, params, args)                                                                  \
    OOMSCOPE_EXPORT ncclResult_t name params                                                                          \
    {                                                                                                                 \
        const auto real = oi::realFn<HookId::name>();                                                                 \
        if (!real)                                                                                                    \
            return ncclInternalError;                                                                                 \
        NcclTable* t = nullptr;                                                                                       \
        const uint32_t window = firstUse(t, comm);                                                                    \
        const ncclResult_t rc = real args;                                                                            \
        if (window != NcclTable::kNone)                                                                               \
            settle(t, window);                                                                                        \
        return rc;                                                                                                    \
    }

OOMSCOPE_NCCL_COLLECTIVE(ncclAllReduce,
                         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                          ncclComm_t comm, cudaStream_t stream),
                         (sendbuff, recvbuff, count, datatype, op, comm, stream))
OOMSCOPE_NCCL_COLLECTIVE(ncclBroadcast,
                         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream),
                         (sendbuff, recvbuff, count, datatype, root, comm, stream))
OOMSCOPE_NCCL_COLLECTIVE(ncclReduce,
                         (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                          int root, ncclComm_t comm, cudaStream_t stream),
                         (sendbuff, recvbuff, count, datatype, op, root, comm, stream))
OOMSCOPE_NCCL_COLLECTIVE(ncclAllGather,
                         (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream),
                         (sendbuff, recvbuff, sendcount, datatype, comm, stream))
OOMSCOPE_NCCL_COLLECTIVE(ncclReduceScatter,
                         (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                         (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))
OOMSCOPE_NCCL_COLLECTIVE(ncclSend,
                         (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                          cudaStream_t stream),
                         (sendbuff, count, datatype, peer, comm, stream))
OOMSCOPE_NCCL_COLLECTIVE(ncclRecv,
                         (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                          cudaStream_t stream),
                         (recvbuff, count, datatype, peer, comm, stream))
