// Implementation of comm/store.h: HashStore, PrefixStore, FileStore.
#include "comm/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"

namespace tripod::comm {

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s;
}

static std::vector<std::string> prefixed(const std::string& p, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(p + k);
  return out;
}

[[noreturn]] static void throw_wait_timeout(const char* store, const std::vector<std::string>& keys,
                                            Millis t) {
  throw TimeoutError(fmt::format("{}: timed out after {:.1f} s waiting for key(s) {}", store,
                                 t.count() / 1e3, join_keys(keys)));
}

// ---- HashStore ----

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes HashStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> lock(mu_);
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) v = std::stoll(std::string(it->second.begin(), it->second.end()));
    v += delta;
    std::string s = std::to_string(v);
    data_[key] = Bytes(s.begin(), s.end());
  }
  cv_.notify_all();
  return v;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  const Millis t = effective(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  auto all = [&] {
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  };
  if (!cv_.wait_for(lock, t, all)) throw_wait_timeout("in-process store", keys, t);
}

// ---- PrefixStore ----

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(prefixed(prefix_, keys));
}
void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  base_->wait(prefixed(prefix_, keys), timeout);
}

// ---- FileStore ----

FileStore::FileStore(std::string directory, Millis default_timeout)
    : Store(default_timeout), dir_(std::move(directory)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  TRIPOD_CHECK_HINT(!ec, "pass a writable directory on a file system all ranks share",
                    "file store: cannot create directory '{}': {}", dir_, ec.message());
}

std::string FileStore::path_of(const std::string& key) const {
  // Keys may hold '/', so encode every byte outside [A-Za-z0-9._-].
  static const char* hex = "0123456789abcdef";
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') name += char(c);
    else { name += '%'; name += hex[c >> 4]; name += hex[c & 15]; }
  }
  return dir_ + "/" + name;
}

void FileStore::set(const std::string& key, const Bytes& value) {
  const std::string path = path_of(key);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    TRIPOD_CHECK(f.good(), "file store: cannot write '{}': {}", tmp, std::strerror(errno));
    f.write(value.data(), std::streamsize(value.size()));
  }
  TRIPOD_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "file store: rename to '{}' failed: {}",
               path, std::strerror(errno));
}

Bytes FileStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::ifstream f(path_of(key), std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const std::string lock_path = dir_ + "/.lock";
  int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  TRIPOD_CHECK(fd >= 0, "file store: cannot open '{}': {}", lock_path, std::strerror(errno));
  ::flock(fd, LOCK_EX);
  int64_t v = 0;
  try {
    if (check({key})) {
      Bytes b = get(key);
      v = std::stoll(std::string(b.begin(), b.end()));
    }
    v += delta;
    set_str(key, std::to_string(v));
  } catch (...) {
    ::flock(fd, LOCK_UN);
    ::close(fd);
    throw;
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return v;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (::access(path_of(k).c_str(), F_OK) != 0) return false;
  return true;
}

void FileStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  const Millis t = effective(timeout);
  const auto deadline = std::chrono::steady_clock::now() + t;
  while (!check(keys)) {
    if (std::chrono::steady_clock::now() > deadline) throw_wait_timeout("file store", keys, t);
    std::this_thread::sleep_for(Millis{5});
  }
}

}  // namespace tripod::comm
