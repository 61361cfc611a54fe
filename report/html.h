// Building blocks of the HTML report, public so the later interactive report (and its tests) can
// reuse them: the JSON data model the page's JS renders, and the escaping rules.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "profile/model.h"

namespace mlprof::report {

// The page's data (schema in docs/report.md): run facts, counters, metrics with grand totals,
// warnings, functions, lines, processes, threads. Per-metric values are arrays indexed like
// "metrics". Strings are passed through as stored; invalid UTF-8 is replaced when serialized.
nlohmann::json report_data(const profile::Profile&);

// Text for HTML element content and quoted attribute values: & < > " ' escaped, valid UTF-8.
std::string html_escape(std::string_view text);

// JSON text safe inside <script type="application/json">: '<', '>', '&', U+2028 and U+2029 are
// written as \uXXXX escapes, so no string in the data can close the script element.
std::string json_for_script(const nlohmann::json& value);

}  // namespace mlprof::report
