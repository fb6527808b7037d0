// Python str methods on UTF-8 strings (code points, Python's whitespace
// and case mapping as utf8proc gives it), shared by the filters and the
// methods.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace oslo {
namespace tmpl {
namespace pystr {

std::vector<uint32_t> decode(const std::string& s);
std::string encode(const std::vector<uint32_t>& cps);
size_t length(const std::string& s);  // in code points

// chars == nullptr: Python whitespace.
std::string strip(const std::string& s, const std::string* chars, bool left, bool right);
std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string capitalize(const std::string& s);   // str.capitalize
std::string title(const std::string& s);        // str.title
std::string jinja_title(const std::string& s);  // Jinja's |title filter
// sep == nullptr: runs of whitespace. maxsplit < 0: no limit.
std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit,
                               bool from_right);
std::vector<std::string> splitlines(const std::string& s);
std::string replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count);
// Code point index of the first (last) occurrence, or -1.
int64_t find(const std::string& s, const std::string& sub, bool last);
int64_t count(const std::string& s, const std::string& sub);
bool is_lower(const std::string& s);
bool is_upper(const std::string& s);

}  // namespace pystr
}  // namespace tmpl
}  // namespace oslo
