// Strong ids shared by the recorder and the report: a StackId is not a ModuleId is not a
// count. Plain values, trivially copyable; 0 means "none" for every id.
#pragma once

#include <cstdint>
#include <functional>

namespace oomscope {

template <class Tag, class Rep>
class StrongId {
public:
    using rep = Rep;
    constexpr StrongId() = default;
    constexpr explicit StrongId(Rep value) : m_value(value) {}
    constexpr Rep value() const { return m_value; }
    constexpr explicit operator bool() const { return m_value != 0; }
    friend constexpr bool operator==(StrongId a, StrongId b) { return a.m_value == b.m_value; }
    friend constexpr bool operator!=(StrongId a, StrongId b) { return a.m_value != b.m_value; }
    friend constexpr bool operator<(StrongId a, StrongId b) { return a.m_value < b.m_value; }

private:
    Rep m_value = 0;
};

using StackId = StrongId<struct StackIdTag, uint32_t>;
using ModuleId = StrongId<struct ModuleIdTag, uint32_t>;
using ApiId = StrongId<struct ApiIdTag, uint16_t>;

} // namespace oomscope

template <class Tag, class Rep>
struct std::hash<oomscope::StrongId<Tag, Rep>> {
    size_t operator()(oomscope::StrongId<Tag, Rep> id) const noexcept { return std::hash<Rep>()(id.value()); }
};
