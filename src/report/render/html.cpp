#include "report/render/html.h"

#include "report/analysis/analysis.h"
#include "report/analysis/diagnosis.h"
#include "report/analysis/live_tree.h"
#include "report/analysis/memory_over_time.h"
#include "report/format.h"
#include "report/json_out.h"
#include "report/render/html_assets.h"
#include "report/render/table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace oomscope::report {
namespace {

// Times on the page: milliseconds since the process started, to the microsecond.
double pageMs(const Report& r, uint64_t timeNs)
{
    const uint64_t start = r.process.startNs;
    const double ms = timeNs >= start ? double(timeNs - start) / 1e6 : 0.0;
    return std::round(ms * 1000.0) / 1000.0;
}

void field(JsonOut& w, const char* key, const std::string& value)
{
    w.key(key);
    w.value(value);
}

template <class T>
void field(JsonOut& w, const char* key, const std::optional<T>& value)
{
    w.key(key);
    if (value)
        w.value(*value);
    else
        w.null();
}

void writeHeadline(JsonOut& w, const Report& r, const HtmlOptions& o)
{
    const Headline h = headline(r);
    w.key("meta");
    w.beginObject();
    field(w, "tool", "oomscope " + r.tool.version);
    field(w, "file", o.fileName);
    field(w, "trigger", enumName(r.trigger.kind));
    w.endObject();
    w.key("headline");
    w.beginObject();
    w.key("alert");
    w.value(h.alert);
    field(w, "title", h.title);
    field(w, "rest", h.rest);
    w.key("facts");
    w.beginArray();
    for (const auto& [label, value] : h.facts) {
        w.beginArray();
        w.value(label);
        w.value(value);
        w.endArray();
    }
    w.endArray();
    w.endObject();
}

void writeDevices(JsonOut& w, const Report& r)
{
    w.key("framework");
    if (r.trigger.framework)
        w.value(*r.trigger.framework);
    else
        w.null();
    w.key("devices");
    w.beginArray();
    for (const MemoryRow& m : r.memory) {
        const Device* d = r.findDevice(m.device);
        w.beginObject();
        w.key("device");
        w.value(m.device);
        field(w, "name", d ? d->name : std::string());
        field(w, "total", d ? d->totalBytes : std::nullopt);
        field(w, "free", d ? d->freeBytes : std::nullopt);
        w.key("tracked");
        w.value(m.trackedBytes);
        w.key("peak");
        w.value(m.peakTrackedBytes);
        field(w, "allocated", m.allocatedBytes);
        field(w, "reserved", m.reservedBytes);
        field(w, "fragmented", m.fragmentedBytes);
        field(w, "largestFree", m.largestFreeBlockBytes);
        field(w, "untracked", m.untrackedBytes);
        field(w, "request", r.trigger.device && *r.trigger.device == m.device ? r.trigger.requestedBytes : std::nullopt);
        w.key("bySource");
        w.beginArray();
        for (const auto& [source, bytes] : byName(m.bySource)) {
            if (bytes == 0)
                continue;
            w.beginArray();
            w.value(source);
            w.value(bytes);
            w.endArray();
        }
        w.endArray();
        if (m.byRole) {  // the framework's memory by role, as the table view prints it
            const RoleBytes& b = *m.byRole;
            w.key("byRoleAtStep");
            w.value(b.timeNs != r.trigger.timeNs);
            w.key("byRole");
            w.beginArray();
            const std::pair<const char*, uint64_t> roles[] = {{"parameters", b.parameters},
                                                              {"gradients", b.gradients},
                                                              {"optimizer state", b.optimizerState},
                                                              {"activations", b.activations},
                                                              {"cache", b.cache}};
            for (const auto& [name, bytes] : roles) {
                w.beginArray();
                w.value(std::string(name));
                w.value(bytes);
                w.endArray();
            }
            w.endArray();
        }
        w.endObject();
    }
    w.endArray();
}

void writeFindings(JsonOut& w, const Report& r, const HtmlOptions& o, const std::vector<LeakFinding>& leaks,
                   const std::vector<Diagnosis>& found)
{
    w.key("diagnosis");
    w.beginArray();
    for (const Diagnosis& d : found) {
        w.beginObject();
        field(w, "severity", enumName(d.severity));
        field(w, "code", d.code);
        field(w, "message", d.message);
        field(w, "suggestion", d.suggestion);
        w.endObject();
    }
    w.endArray();
    w.key("leaks");
    w.beginArray();
    for (const BlamedLeak& b : blameLeaks(r, leaks, o.source)) {
        w.beginObject();
        field(w, "summary", describeGrowth(b));
        field(w, "where", b.blame.frame ? describeFrame(r, *b.blame.frame) : std::string());
        field(w, "text", b.blame.text);
        field(w, "pattern", b.blame.pattern);
        field(w, "held_by", b.heldBy ? describeRetainer(*b.heldBy) : std::string());
        field(w, "remedy", b.blame.remedy);
        w.endObject();
    }
    w.endArray();
}

void writeSites(JsonOut& w, const Report& r, const HtmlOptions& o)
{
    w.key("sites");
    w.beginArray();
    for (size_t i = 0; i < r.sites.size() && i < o.topSites; ++i) {
        const Site& site = r.sites[i];
        const Stack* stack = r.findStack(site.stack);
        bool borrowed = false;
        const Frame* line = stack ? programFrame(*stack, &borrowed) : nullptr;
        w.beginObject();
        w.key("bytes");
        w.value(site.bytes);
        w.key("count");
        w.value(site.count);
        w.key("device");
        w.value(site.device);
        field(w, "kind", enumName(site.kind));
        field(w, "source", enumName(stackSource(r, site.stack)));
        field(w, "where", line ? line->file + ":" + std::to_string(line->line) + "  " + line->function
                               : stack && !stack->frames.empty() ? describeFrame(r, stack->frames.front())
                                                                 : std::string("(no stack)"));
        w.key("borrowed");
        w.value(borrowed);
        w.key("frames");
        w.beginArray();
        for (size_t f = 0; stack && f < stack->frames.size() && f < 64; ++f)
            w.value(describeFrame(r, stack->frames[f]));
        w.endArray();
        w.endObject();
    }
    w.endArray();
    w.key("sitesTotal");
    w.value(uint64_t(r.sites.size()));
}

void writeOverTime(JsonOut& w, const Report& r)
{
    w.key("overTime");
    w.beginArray();
    for (const DeviceOverTime& d : memoryOverTime(r)) {
        w.beginObject();
        w.key("device");
        w.value(d.device);
        w.key("start");
        w.value(pageMs(r, std::max(d.startNs, d.timeNs.empty() ? d.startNs : d.timeNs.front())));
        w.key("end");
        w.value(pageMs(r, d.endNs));
        w.key("sources");
        w.beginArray();
        for (Source s : d.sources)
            w.value(enumName(s));
        w.endArray();
        w.key("t");
        w.beginArray();
        for (uint64_t t : d.timeNs)
            w.value(pageMs(r, std::min(t, d.endNs)));
        w.endArray();
        w.key("bytes");
        w.beginArray();
        for (const std::vector<uint64_t>& series : d.bytes) {
            w.beginArray();
            for (uint64_t v : series)
                w.value(v);
            w.endArray();
        }
        w.endArray();
        for (const auto& [key, series] : {std::pair<const char*, const std::vector<uint64_t>*>{"totalMin", &d.totalMin},
                                          {"totalMax", &d.totalMax}}) {
            w.key(key);
            w.beginArray();
            for (uint64_t v : *series)
                w.value(v);
            w.endArray();
        }
        for (const auto& [key, points] : {std::pair<const char*, const std::vector<std::pair<uint64_t, uint64_t>>*>{
                                              "allocated", &d.allocated},
                                          {"reserved", &d.reserved}}) {
            w.key(key);
            w.beginArray();
            for (const auto& [t, v] : *points) {
                w.beginArray();
                w.value(pageMs(r, t));
                w.value(v);
                w.endArray();
            }
            w.endArray();
        }
        w.key("markers");
        w.beginArray();
        for (const TimeMarker& m : d.markers) {
            static const char* const kKinds[] = {"step", "label", "failure", "oom"};
            w.beginArray();
            w.value(pageMs(r, m.timeNs));
            w.value(kKinds[int(m.kind)]);
            w.value(m.label);
            w.endArray();
        }
        w.endArray();
        w.key("markersDropped");
        w.value(uint64_t(d.markersDropped));
        w.key("events");
        w.value(d.events);
        w.endObject();
    }
    w.endArray();
}

void writeNode(JsonOut& w, const LiveNode& n)
{
    static const char* const kKinds[] = {"root", "device", "python", "native", "nostack", "smaller"};
    w.beginObject();
    field(w, "n", n.name);
    field(w, "k", kKinds[int(n.kind)]);
    w.key("v");
    w.value(n.bytes);
    if (!n.detail.empty()) {
        w.key("d");
        w.beginArray();
        for (const std::string& d : n.detail)
            w.value(d);
        w.endArray();
    }
    if (!n.children.empty()) {
        w.key("c");
        w.beginArray();
        for (const LiveNode& c : n.children)
            writeNode(w, c);
        w.endArray();
    }
    w.endObject();
}

void writeSegments(JsonOut& w, const Report& r)
{
    std::map<int64_t, std::vector<const Segment*>> byDevice;
    for (const Segment& s : r.segments)
        byDevice[s.device].push_back(&s);
    w.key("segments");
    w.beginArray();
    for (const auto& [device, segments] : byDevice) {
        const MemoryRow* row = r.findMemory(device);
        w.beginObject();
        w.key("device");
        w.value(device);
        field(w, "request", r.trigger.device && *r.trigger.device == device ? r.trigger.requestedBytes : std::nullopt);
        field(w, "largestFree", row ? row->largestFreeBlockBytes : std::nullopt);
        w.key("list");
        w.beginArray();
        for (const Segment* s : segments) {
            w.beginArray();
            w.value(s->address);
            w.value(s->size);
            w.value(enumName(s->kind));
            w.beginArray();
            for (const Block& b : s->blocks) {
                w.beginArray();
                w.value(b.offset);
                w.value(b.size);
                w.value(int64_t(b.state));
                w.endArray();
            }
            w.endArray();
            w.value(poolName(r, s->poolId));  // the page colours the bars by pool where there are several
            w.endArray();
        }
        w.endArray();
        w.endObject();
    }
    w.endArray();
}


} // namespace

std::string fillTemplate(const std::string& page, const std::map<std::string, std::string>& values)
{
    std::string out;
    size_t at = 0;
    for (size_t open; (open = page.find("{{", at)) != std::string::npos;) {
        const size_t close = page.find("}}", open);
        auto it = close == std::string::npos ? values.end() : values.find(page.substr(open + 2, close - open - 2));
        if (it == values.end()) {
            out.append(page, at, open + 2 - at);
            at = open + 2;
            continue;
        }
        out.append(page, at, open - at);
        out += it->second;
        at = close + 2;
    }
    out.append(page, at, std::string::npos);
    return out;
}

std::string escapeHtml(const std::string& text)
{
    std::string out;
    for (char c : text) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out += c;
        }
    }
    return out;
}

std::string htmlData(const Report& report, const HtmlOptions& options)
{
    JsonOut w;
    w.beginObject();
    writeHeadline(w, report, options);
    writeDevices(w, report);
    // The findings once, for the page's cards and its text view alike.
    const std::vector<LeakFinding> leaks = findLeaks(report);
    const std::vector<Diagnosis> found = report.diagnosis.empty() ? diagnose(report, leaks, options.source) : report.diagnosis;
    writeFindings(w, report, options, leaks, found);
    writeSites(w, report, options);
    writeOverTime(w, report);
    w.key("flame");
    writeNode(w, liveTree(report));
    if (const std::optional<LiveNode> peak = peakTree(report)) {
        w.key("flamePeak");
        writeNode(w, *peak);
    }
    writeSegments(w, report);
    RenderOptions text;
    text.source = options.source;
    text.diagnosis = &found;
    std::ostringstream rendered;
    renderReport(report, text, rendered);
    field(w, "text", rendered.str());
    w.endObject();
    return std::move(w.buffer());
}

std::string renderHtml(const Report& report, const HtmlOptions& options)
{
    std::string data = htmlData(report, options);
    // Inside <script>, "</" could end the element: JSON lets it be written "<\/".
    for (size_t at = 0; (at = data.find("</", at)) != std::string::npos; at += 3)
        data.replace(at, 2, "<\\/");
    const Headline h = headline(report);
    return fillTemplate(htmlPageTemplate(),
                {{"title", escapeHtml(h.title + h.rest + (options.fileName.empty() ? "" : " - " + options.fileName))},
                 {"css", htmlPageStyle()},
                 {"data", data},
                 {"js", htmlPageScript()}});
}

} // namespace oomscope::report
