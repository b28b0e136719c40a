#include "track/module_map.h"
#include "interpret/symbolize.h"

#include <catch2/catch.hpp>

namespace {
// Static: only in .symtab, invisible to dladdr.
__attribute__((noinline)) int hiddenHelperForSymbolizeTest(int x)
{
    asm volatile("" ::: "memory");
    return x * 3 + 1;
}
} // namespace

TEST_CASE("symbolizer names a static function from .symtab", "[symbolize]")
{
    REQUIRE(hiddenHelperForSymbolizeTest(2) == 7);
    oomscope::interpret::Symbolizer symbolizer(oomscope::track::loadedModules());
    // Resolve an address inside the function, as a return address would be.
    const auto pc = reinterpret_cast<uint64_t>(&hiddenHelperForSymbolizeTest) + 4;
    const auto frame = symbolizer.resolve(pc);
    REQUIRE(frame.module >= 0);
    CHECK(frame.symbol.find("hiddenHelperForSymbolizeTest(int)") != std::string::npos);
    const auto& module = symbolizer.modules()[size_t(frame.module)];
    CHECK(module.path.find("unit_tests") != std::string::npos);
    CHECK(frame.offset == pc - module.base);
    CHECK_FALSE(module.buildId.empty());
}

TEST_CASE("symbolizer: unknown addresses have no module", "[symbolize]")
{
    oomscope::interpret::Symbolizer symbolizer(oomscope::track::loadedModules());
    const auto frame = symbolizer.resolve(8);
    CHECK(frame.module == -1);
    CHECK(frame.symbol.empty());
}

TEST_CASE("demangling", "[symbolize]")
{
    CHECK(oomscope::interpret::demangle("_ZN3foo3barEv") == "foo::bar()");
    CHECK(oomscope::interpret::demangle("plain_c_name") == "plain_c_name");
    CHECK(oomscope::interpret::demangle("") == "");
}
