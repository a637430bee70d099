// Implementation of base/config.h.
#include "base/config.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "base/env.h"
#include "base/error.h"

namespace tripod::config {
namespace {

std::string substitute(const std::string& word, const std::string& where, int line, const EnvLookup& env) {
  std::string out;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '$' || i + 1 >= word.size() || word[i + 1] != '{') {
      out += word[i];
      continue;
    }
    const size_t close = word.find('}', i + 2);
    TRIPOD_CHECK_HINT(close != std::string::npos, "close it: ${NAME}", "{}:{}: unterminated ${{ in '{}'", where,
                      line, word);
    std::string name = word.substr(i + 2, close - i - 2), fallback;
    bool has_fallback = false;
    if (const size_t d = name.find(":-"); d != std::string::npos) {
      fallback = name.substr(d + 2);
      name = name.substr(0, d);
      has_fallback = true;
    }
    auto value = env(name);
    TRIPOD_CHECK_HINT(value || has_fallback, fmt::format("export {}=... or write ${{{}:-default}}", name, name),
                      "{}:{}: environment variable {} is not set", where, line, name);
    out += value ? *value : fallback;
    i = close;
  }
  return out;
}

}  // namespace

std::vector<std::string> parse_flags(const std::string& text, const std::string& where, const EnvLookup& env) {
  std::vector<std::string> words;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string word;
    bool in_word = false;
    char quote = 0;
    for (size_t i = 0; i <= line.size(); ++i) {
      const char ch = i < line.size() ? line[i] : '\0';
      if (quote) {
        TRIPOD_CHECK_HINT(ch != '\0', "close the quote on the same line", "{}:{}: unterminated {} quote", where,
                          lineno, quote);
        if (ch == quote) quote = 0;
        else word += ch;
        continue;
      }
      if (ch == '"' || ch == '\'') {
        quote = ch;
        in_word = true;
      } else if (ch == '#' && !in_word) {
        break;
      } else if (ch == '\0' || std::isspace(static_cast<unsigned char>(ch))) {
        if (in_word) words.push_back(substitute(word, where, lineno, env));
        word.clear();
        in_word = false;
      } else if (ch == '\\' && i + 1 == line.size()) {
        break;  // shell-style line continuation: the next line continues the flags
      } else {
        word += ch;
        in_word = true;
      }
    }
    if (in_word) words.push_back(substitute(word, where, lineno, env));
  }
  return words;
}

std::vector<std::string> read_flag_file(const std::string& path) {
  std::ifstream in(path);
  TRIPOD_CHECK_HINT(in.good(), "check the --config path", "cannot open --config file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_flags(ss.str(), path, [](const std::string& n) { return env::get(n.c_str()); });
}

std::vector<std::string> expand_config_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config") {
      TRIPOD_CHECK_HINT(i + 1 < argc, "pass --config FILE", "--config needs a file name");
      for (auto& w : read_flag_file(argv[++i])) out.push_back(std::move(w));
    } else if (a.rfind("--config=", 0) == 0) {
      for (auto& w : read_flag_file(a.substr(9))) out.push_back(std::move(w));
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace tripod::config
