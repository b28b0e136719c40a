#include "report/analysis/analysis.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

using namespace oomscope::report;

TEST_CASE("live framework blocks grouped by their Python stack", "[analysis]")
{
    Report r = oomscope::test::sampleReport();
    REQUIRE(hasBlockStacks(r));
    // Two more active blocks: one of stack 1, one without a stack (autograd's thread).
    r.segments[0].blocks.push_back(Block{2ull << 30, 256ull << 20, BlockState::ActiveAllocated, 1});
    r.segments[0].blocks.push_back(Block{3ull << 30, 512ull << 20, BlockState::ActiveAllocated, std::nullopt});
    r.segments[0].blocks.push_back(Block{4ull << 30, 64ull << 20, BlockState::ActiveAwaitingFree, 3});
    const auto sites = tensorSites(r);
    REQUIRE(sites.size() == 3);
    CHECK(sites[0].stack == 1u);
    CHECK(sites[0].bytes == (1ull << 30) + (256ull << 20));
    CHECK(sites[0].count == 2);
    CHECK_FALSE(sites[1].stack);
    CHECK(sites[1].bytes == 512ull << 20);
    CHECK(sites[2].stack == 3u);  // pending-free blocks still hold memory
    r.segments[0].blocks.clear();
    CHECK_FALSE(hasBlockStacks(r));
    CHECK(tensorSites(r).empty());
}

TEST_CASE("the program's line: the innermost Python frame outside the frameworks", "[analysis]")
{
    auto py = [](std::string file, uint32_t line, std::string function) {
        Frame f;
        f.kind = Frame::Kind::Python;
        f.file = std::move(file);
        f.line = line;
        f.function = std::move(function);
        return f;
    };
    const std::string venv = "/opt/torch/.venv/lib/python3.12/site-packages/";  // a venv named torch
    Stack s;
    s.frames.push_back(Frame{});  // native
    s.frames.push_back(py(venv + "torch/nn/modules/linear.py", 125, "Linear.forward"));
    s.frames.push_back(py(venv + "transformers/activations.py", 66, "forward"));
    s.frames.push_back(py("/home/user/train.py", 40, "main"));
    bool borrowed = true;
    const Frame* f = programFrame(s, &borrowed);
    REQUIRE(f);
    CHECK(f->file == venv + "transformers/activations.py");
    CHECK_FALSE(borrowed);

    // A stack lent by the main thread: the marker frame is skipped and reported.
    Stack lent;
    lent.frames.push_back(py(kBorrowedFrameFile, 0, "Python stack of the main thread"));
    lent.frames.push_back(py(venv + "torch/autograd/__init__.py", 347, "backward"));
    lent.frames.push_back(py("/home/user/train.py", 52, "main"));
    f = programFrame(lent, &borrowed);
    REQUIRE(f);
    CHECK(f->line == 52);
    CHECK(borrowed);

    Stack cupy;
    cupy.frames.push_back(py(venv + "cupy/_creation/basic.py", 252, "zeros"));
    cupy.frames.push_back(py("/home/user/work.py", 64, "work"));
    f = programFrame(cupy);
    REQUIRE(f);
    CHECK(f->line == 64);

    // Only PyTorch's frames: the innermost one.
    Stack torchOnly;
    torchOnly.frames.push_back(py(venv + "torch/optim/adamw.py", 10, "step"));
    f = programFrame(torchOnly);
    REQUIRE(f);
    CHECK(f->function == "step");
    CHECK(programFrame(Stack{}) == nullptr);
}
