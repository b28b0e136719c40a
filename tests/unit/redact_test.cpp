// Secrets kept out of what oomscope writes (common/redact.h): each rule, what it keeps, and the
// count. The secrets are assembled here, never written whole in the source.
#include "common/redact.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using oomscope::common::Redactor;

namespace {
std::string rep(char c, size_t n)
{
    return std::string(n, c);
}
const std::string kHf = "hf_" + rep('Q', 34);
const std::string kGithub = "ghp_" + rep('Z', 36);
const std::string kGithubPat = "github_pat_" + rep('A', 22) + "_" + rep('b', 59);
const std::string kAws = "AKIA" + rep('7', 16);
const std::string kSlack = "xoxb-" + rep('1', 12) + "-" + rep('c', 24);
const std::string kOpenAi = "sk-proj-" + rep('k', 40);
const std::string kBearerValue = rep('t', 32);
} // namespace

TEST_CASE("options and assignments named like secrets lose their values", "[redact]")
{
    Redactor r(nullptr);
    std::vector<std::string> argv = {"python",         "train.py",       "--hf-token",  "abc123secret", "--wandb-key=zzz",
                                     "X_API_KEY=v4lue", "db.password=pw", "--lr",        "0.1",          "--max-new-tokens",
                                     "256",            "--auth-header",  "--verbose",   "--use-auth=true"};
    CHECK(r.arguments(argv) == 4);
    const std::vector<std::string> want = {"python",           "train.py",         "--hf-token", "<redacted>",
                                           "--wandb-key=<redacted>", "X_API_KEY=<redacted>", "db.password=<redacted>",
                                           "--lr",             "0.1",              "--max-new-tokens",
                                           "256",              "--auth-header",    "--verbose",  "--use-auth=true"};
    CHECK(argv == want);
}

TEST_CASE("values of known shapes are redacted wherever they are", "[redact]")
{
    Redactor r(nullptr);
    std::vector<std::string> argv = {"run", kHf, "--repo=" + kGithub, "pat:" + kGithubPat, kAws, kSlack, kOpenAi,
                                     "Authorization: Bearer " + kBearerValue,
                                     "https://alice:" + rep('p', 12) + "@example.com/data", "https://example.com/public"};
    CHECK(r.arguments(argv) == 8);
    CHECK(argv[1] == "<redacted>");
    CHECK(argv[2] == "--repo=<redacted>");
    CHECK(argv[3] == "pat:<redacted>");
    CHECK(argv[4] == "<redacted>");
    CHECK(argv[5] == "<redacted>");
    CHECK(argv[6] == "<redacted>");
    CHECK(argv[7] == "Authorization: Bearer <redacted>");
    CHECK(argv[8] == "https://alice:<redacted>@example.com/data");
    CHECK(argv[9] == "https://example.com/public");
    std::string line = "    token = load('" + kHf + "')  # and " + kAws;
    CHECK(r.text(line) == 2);
    CHECK(line == "    token = load('<redacted>')  # and <redacted>");
}

TEST_CASE("OOMSCOPE_REDACT adds expressions, off keeps everything, a bad one is said", "[redact]")
{
    Redactor user("corp-[0-9]{6}");
    std::vector<std::string> argv = {"--id", "corp-123456", kHf};
    CHECK(user.arguments(argv) == 2);
    CHECK(argv == std::vector<std::string>{"--id", "<redacted>", "<redacted>"});

    Redactor off("off");
    std::vector<std::string> kept = {"--hf-token", "abc", kHf};
    CHECK_FALSE(off.enabled());
    CHECK(off.arguments(kept) == 0);
    CHECK(kept == std::vector<std::string>{"--hf-token", "abc", kHf});

    std::string error;
    Redactor bad("([", &error);
    CHECK(error.find("OOMSCOPE_REDACT is not a regular expression") == 0);
    std::vector<std::string> still = {kHf};
    CHECK(bad.arguments(still) == 1);  // the built-in rules stay
}
