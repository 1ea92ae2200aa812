// The JSON text of a config: parsing with messages that name the file, line and column, the
// nesting-depth check that runs before parsing, and `--set key.path=value` overrides.
#include "core/config/ds_config.h"

#include "core/config/ds_config_reading.h"

#include <algorithm>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zerosim {

using ds_config_detail::describe;
using ds_config_detail::join_path;
using ds_config_detail::json;

Status apply_override(nlohmann::json& document, const std::string& assignment) {
  try {
    const size_t equals = assignment.find('=');
    if (equals == std::string::npos) {
      return invalid_argument("--set " + assignment + ": expected KEY=VALUE (for example zero_optimization.stage=3)");
    }
    const std::string key = assignment.substr(0, equals);
    const std::string text = assignment.substr(equals + 1);
    std::vector<std::string> segments;
    size_t start = 0;
    while (true) {
      const size_t dot = key.find('.', start);
      segments.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    for (const std::string& segment : segments) {
      if (segment.empty()) {
        return invalid_argument("--set " + assignment + ": the key \"" + key + "\" has an empty part");
      }
    }
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;

    if (document.is_null()) document = json::object();
    if (!document.is_object()) {
      return invalid_argument(key + ": cannot set it, the document is " + describe(document) + ", not an object");
    }
    json* node = &document;
    std::string path;
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
      path = join_path(path, segments[i]);
      auto it = node->find(segments[i]);
      if (it == node->end()) {
        node = &((*node)[segments[i]] = json::object());
      } else if (it->is_object()) {
        node = &*it;
      } else {
        return invalid_argument(path + ": cannot set " + key + " because " + path + " is " + describe(*it) +
                                ", not an object");
      }
    }
    (*node)[segments.back()] = std::move(value);
    return Status::ok_status();
  } catch (const std::exception& error) {
    return invalid_argument("--set " + assignment + ": " + error.what());
  }
}

Result<nlohmann::json> parse_json_text(const std::string& text, const std::string& source_name) {
  {
    Status nesting = check_json_nesting(text, 256, source_name);
    if (!nesting.ok()) return invalid_argument(nesting.message());
  }
  // DeepSpeed loads config files with dict_raise_error_on_duplicate_keys; so does this parser.
  struct OpenObject {
    std::set<std::string> keys;
    std::string key;  // the key whose value is being parsed
  };
  std::vector<OpenObject> open;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
        open.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && parsed.is_string()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          open.back().key = key;
          if (!open.back().keys.insert(key).second && duplicate.empty()) {
            std::string path;
            for (const OpenObject& object : open) path = join_path(path, object.key);
            duplicate = path;
          }
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    json document = json::parse(text, callback, /*allow_exceptions=*/true, /*ignore_comments=*/true);
    if (!duplicate.empty()) {
      return invalid_argument(duplicate + ": duplicate key in " + source_name + " (DeepSpeed refuses duplicate keys)");
    }
    return document;
  } catch (const json::parse_error& error) {
    // error.byte counts the characters read, the offending one included (1-based).
    const size_t offset = std::min<size_t>(error.byte > 0 ? error.byte - 1 : 0, text.size());
    size_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    const size_t column = offset - line_start + 1;
    std::string detail = error.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..."
    if (const size_t colon = detail.find(": "); colon != std::string::npos) detail = detail.substr(colon + 2);
    // The parser quotes what it last read, which may be any bytes of a hostile file: a terminal
    // gets them as \xNN, not raw.
    std::string printable;
    for (const char c : detail) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte >= 0x20 && byte < 0x7f) {
        printable += c;
      } else {
        static const char* const kHex = "0123456789abcdef";
        printable += std::string("\\x") + kHex[byte >> 4] + kHex[byte & 15];
      }
    }
    detail = printable;
    return invalid_argument(source_name + ":" + std::to_string(line) + ":" + std::to_string(column) +
                            ": invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) +
                            ": " + detail);
  } catch (const std::exception& error) {
    return invalid_argument(source_name + ": cannot parse JSON: " + error.what());
  }
}

Status check_json_nesting(std::string_view text, int max_depth, const std::string& source_name) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return data_loss(source_name + ": JSON nested deeper than " + std::to_string(max_depth) + " levels at byte " +
                         std::to_string(i));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status();
}
}  // namespace zerosim
