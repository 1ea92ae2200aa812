#include "reports/report_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace zerosim {

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and carriage return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += ' ';
        else out += c;
    }
  }
  return out;
}

std::string json_text(const nlohmann::json& document) {
  return document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_text(const nlohmann::ordered_json& document) {
  return document.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status write_report_file(const std::string& path, const std::string& text, const std::string& what) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(what + " " + temporary + " cannot be created: " + std::strerror(errno));
    out << text;
    out.flush();
    if (!out) return io_error(what + " " + temporary + " could not be written");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return io_error(what + ": rename " + temporary + " to " + path + " failed: " + std::strerror(errno));
  }
  return Status();
}

}  // namespace zerosim
