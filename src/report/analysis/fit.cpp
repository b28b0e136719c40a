#include "report/analysis/fit.h"

#include <algorithm>
#include <cmath>

namespace oomscope::report {
namespace {

// Solves the normal equations of a polynomial fit of degree 1 or 2 (Gaussian elimination on a
// 3x3 at most); false when they are singular (fewer distinct sizes than terms).
bool leastSquares(const std::vector<double>& x, const std::vector<double>& y, int degree, double* coef)
{
    const int n = degree + 1;
    double m[3][4] = {};
    for (size_t i = 0; i < x.size(); ++i) {
        double powers[5] = {1, x[i], x[i] * x[i], x[i] * x[i] * x[i], x[i] * x[i] * x[i] * x[i]};
        for (int r = 0; r < n; ++r) {
            for (int c = 0; c < n; ++c)
                m[r][c] += powers[r + c];
            m[r][n] += powers[r] * y[i];
        }
    }
    for (int col = 0; col < n; ++col) {
        int pivot = col;
        for (int r = col + 1; r < n; ++r)
            if (std::fabs(m[r][col]) > std::fabs(m[pivot][col]))
                pivot = r;
        if (std::fabs(m[pivot][col]) < 1e-12)
            return false;
        std::swap(m[col], m[pivot]);
        for (int r = 0; r < n; ++r) {
            if (r == col)
                continue;
            const double f = m[r][col] / m[col][col];
            for (int c = col; c <= n; ++c)
                m[r][c] -= f * m[col][c];
        }
    }
    for (int r = 0; r < n; ++r)
        coef[r] = m[r][n] / m[r][r];
    return true;
}

} // namespace

FitModel fitPeaks(const std::vector<FitPoint>& points)
{
    FitModel model;
    std::map<Source, bool> seen;
    for (const FitPoint& p : points)
        for (const auto& [s, bytes] : p.bytes)
            seen[s] = seen[s] || bytes > 0;
    for (const auto& [source, any] : seen) {
        if (!any)
            continue;
        std::vector<double> x, y;
        for (const FitPoint& p : points) {
            x.push_back(double(p.size));
            auto it = p.bytes.find(source);
            y.push_back(it == p.bytes.end() ? 0.0 : double(it->second));
        }
        SourceModel m;
        double coef[3] = {};
        if (leastSquares(x, y, 1, coef)) {
            m.a = coef[0];
            m.b = coef[1];
        } else {
            m.a = y.empty() ? 0 : *std::max_element(y.begin(), y.end());  // one size only: a constant
        }
        double worst = 0, largest = 1;
        for (size_t i = 0; i < x.size(); ++i) {
            worst = std::max(worst, std::fabs(m.at(x[i]) - y[i]));
            largest = std::max(largest, y[i]);
        }
        double q[3] = {};
        if (x.size() >= 4 && worst > 0.02 * largest && leastSquares(x, y, 2, q) && q[2] > 0) {
            m.a = q[0];
            m.b = q[1];
            m.c = q[2];
            m.quadratic = true;
        }
        model[source] = m;
    }
    return model;
}

uint64_t predictPeak(const FitModel& model, uint64_t n, std::map<Source, uint64_t>* bySource)
{
    uint64_t total = 0;
    for (const auto& [source, m] : model) {
        const double v = std::max(0.0, std::round(m.at(double(n))));
        const uint64_t bytes = v >= 1.8e19 ? UINT64_MAX / 4 : uint64_t(v);
        if (bySource)
            (*bySource)[source] = bytes;
        total += bytes;
    }
    return total;
}

uint64_t headroomAt(const SourceModel& largestSegment, uint64_t n)
{
    const double v = kHeadroomShare * largestSegment.at(double(n));
    return v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX / 4 : uint64_t(v);
}

uint64_t largestFitting(const FitModel& model, uint64_t fixed, uint64_t capacity, const SourceModel* headroom,
                        uint64_t most)
{
    auto fits = [&](uint64_t n) {
        const uint64_t need = predictPeak(model, n) + (headroom ? headroomAt(*headroom, n) : 0);
        return fixed <= capacity && need <= capacity - fixed;
    };
    if (!fits(1))
        return 0;
    uint64_t lo = 1, hi = 2;
    while (hi <= most && fits(hi)) {
        lo = hi;
        hi *= 2;
    }
    hi = std::min(hi, most + 1);
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

} // namespace oomscope::report
