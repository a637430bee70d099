// Store: a small key-value store for bootstrap (exchanging addresses,
// NCCL unique ids, join counts), in the spirit of c10d's Store.
//
// Relates to: comm/tcp_store.h (TcpStore, hosted by rank 0), comm/context.h.
// Reference: PyTorch torch/csrc/distributed/c10d/Store.hpp.
//
// Contract:
//  - Thread-safe. Values are bytes. Keys are any string.
//  - get() and wait() block until the keys exist, up to the timeout, then
//    throw TimeoutError naming the missing keys. timeout 0 = the store's
//    default timeout.
//  - add() creates the key at 0 and returns the new value (an int64 written
//    as decimal text, so get() of a counter reads "3").
//
// Usage:
//   HashStore store;                       // in-process (threads as ranks)
//   store.set("addr/1", bytes);
//   auto v = store.get("addr/0", Millis{5000});
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tripod::comm {

using Millis = std::chrono::milliseconds;
using Bytes = std::vector<char>;

class Store {
 public:
  explicit Store(Millis default_timeout = Millis{300000}) : timeout_(default_timeout) {}
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;            // required
  virtual Bytes get(const std::string& key, Millis timeout = Millis{0}) = 0;   // required
  virtual int64_t add(const std::string& key, int64_t delta) = 0;              // required
  // True when every key exists now (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;                // required
  virtual void wait(const std::vector<std::string>& keys, Millis timeout = Millis{0}) = 0;  // required

  void set_str(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_str(const std::string& key, Millis timeout = Millis{0}) {
    Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
  Millis timeout() const { return timeout_; }
  void set_timeout(Millis t) { timeout_ = t; }

 protected:
  Millis effective(Millis t) const { return t.count() > 0 ? t : timeout_; }
  Millis timeout_;
};

// In-process store (threads as ranks in tests).
class HashStore : public Store {
 public:
  using Store::Store;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout = Millis{0}) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = Millis{0}) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

// Prepends a prefix to every key (one namespace per group / phase).
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base)
      : Store(base->timeout()), prefix_(std::move(prefix)), base_(std::move(base)) {}
  void set(const std::string& key, const Bytes& value) override { base_->set(prefix_ + key, value); }
  Bytes get(const std::string& key, Millis timeout = Millis{0}) override {
    return base_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = Millis{0}) override;

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

// One file per key in a directory on a shared file system (no TCP port
// needed). Use a fresh, empty directory per job: keys of an old job would
// be read as this job's. set() is atomic (temp + rename), add() holds an
// flock on the directory's lock file.
class FileStore : public Store {
 public:
  FileStore(std::string directory, Millis default_timeout = Millis{300000});
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout = Millis{0}) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout = Millis{0}) override;

 private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

// "a, b, c" for error messages.
std::string join_keys(const std::vector<std::string>& keys);

}  // namespace tripod::comm
