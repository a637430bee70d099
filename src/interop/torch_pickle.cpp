// Implementation of interop/torch_pickle.h: a stored-entry zip reader and a
// restricted pickle interpreter. References: the ZIP application note
// (PKWARE APPNOTE.TXT 6.3, sections 4.3 and 4.5.3 for ZIP64), Python's
// Lib/pickle.py and Lib/pickletools.py (opcodes), torch/serialization.py and
// torch/_utils.py (what torch.save writes).
#include "interop/torch_pickle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "base/error.h"

namespace tripod::interop {

// ---- zip ----

namespace {

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

ZipArchive::ZipArchive(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIPOD_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  bytes_ = static_cast<uint64_t>(st.st_size);
  if (bytes_ > 0) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    TRIPOD_CHECK(p != MAP_FAILED, "{}: cannot map: {}", path, std::strerror(errno));
    base_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  auto bad = [&](const std::string& why) { return fmt::format("{}: not a torch.save zip archive ({})", path, why); };
  // End of central directory: the last 22+ bytes, after at most a 64 KiB comment.
  TRIPOD_CHECK(bytes_ >= 22, "{}", bad("too short"));
  int64_t eocd = -1;
  const uint64_t lowest = bytes_ > 22 + 65535 ? bytes_ - 22 - 65535 : 0;
  for (uint64_t i = bytes_ - 22 + 1; i-- > lowest;)
    if (le(base_ + i, 4) == 0x06054b50) {
      eocd = static_cast<int64_t>(i);
      break;
    }
  TRIPOD_CHECK(eocd >= 0, "{}", bad("no end-of-central-directory record"));
  const uint8_t* e = base_ + eocd;
  uint64_t count = le(e + 10, 2), cd_size = le(e + 12, 4), cd_offset = le(e + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffffull || cd_offset == 0xffffffffull) {
    TRIPOD_CHECK(eocd >= 20 && le(base_ + eocd - 20, 4) == 0x07064b50, "{}", bad("ZIP64 locator missing"));
    const uint64_t z = le(base_ + eocd - 20 + 8, 8);
    TRIPOD_CHECK(z + 56 <= bytes_ && le(base_ + z, 4) == 0x06064b50, "{}", bad("ZIP64 record missing"));
    count = le(base_ + z + 32, 8);
    cd_size = le(base_ + z + 40, 8);
    cd_offset = le(base_ + z + 48, 8);
  }
  TRIPOD_CHECK(cd_offset <= bytes_ && cd_size <= bytes_ - cd_offset, "{}", bad("central directory out of the file"));
  uint64_t pos = cd_offset;
  for (uint64_t k = 0; k < count; ++k) {
    TRIPOD_CHECK(pos + 46 <= cd_offset + cd_size && le(base_ + pos, 4) == 0x02014b50, "{}",
                 bad(fmt::format("central directory entry {} malformed", k)));
    const uint8_t* c = base_ + pos;
    Raw r{le(c + 42, 4), le(c + 20, 4), le(c + 24, 4), static_cast<uint16_t>(le(c + 10, 2))};
    const uint64_t name_len = le(c + 28, 2), extra_len = le(c + 30, 2), comment_len = le(c + 32, 2);
    TRIPOD_CHECK(pos + 46 + name_len + extra_len + comment_len <= cd_offset + cd_size, "{}",
                 bad("central directory entry overruns"));
    std::string name(reinterpret_cast<const char*>(c + 46), name_len);
    // ZIP64 extended information: the fields saturated above, in this order.
    for (uint64_t x = 0; x + 4 <= extra_len;) {
      const uint8_t* f = c + 46 + name_len + x;
      const uint64_t id = le(f, 2), len = le(f + 2, 2);
      TRIPOD_CHECK(x + 4 + len <= extra_len, "{}", bad("extra field overruns"));
      if (id == 0x0001) {
        uint64_t off = 4;
        for (uint64_t* v : {&r.size, &r.compressed, &r.local_offset})
          if (*v == 0xffffffffull) {
            TRIPOD_CHECK(off + 8 <= 4 + len, "{}", bad("short ZIP64 field"));
            *v = le(f + off, 8);
            off += 8;
          }
      }
      x += 4 + len;
    }
    entries_[name] = r;
    pos += 46 + name_len + extra_len + comment_len;
  }
}

ZipArchive::~ZipArchive() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), bytes_);
}

ZipArchive::Entry ZipArchive::entry(const std::string& name) const {
  auto it = entries_.find(name);
  TRIPOD_CHECK(it != entries_.end(), "{}: no entry {}", path_, name);
  const Raw& r = it->second;
  TRIPOD_CHECK(r.method == 0, "{}: entry {} is compressed (method {}); torch.save writes stored entries only", path_,
               name, r.method);
  TRIPOD_CHECK(r.local_offset + 30 <= bytes_ && le(base_ + r.local_offset, 4) == 0x04034b50,
               "{}: entry {}: bad local header", path_, name);
  const uint64_t data = r.local_offset + 30 + le(base_ + r.local_offset + 26, 2) + le(base_ + r.local_offset + 28, 2);
  TRIPOD_CHECK(data <= bytes_ && r.size <= bytes_ - data, "{}: entry {} runs past the end of the file", path_, name);
  return {base_ + data, r.size};
}

std::vector<std::string> ZipArchive::names() const {
  std::vector<std::string> v;
  for (const auto& [n, r] : entries_) v.push_back(n);
  return v;
}

// ---- values ----

const PyValue* PyValue::get(const std::string& key) const {
  if (kind != Kind::kDict && kind != Kind::kObject) return nullptr;
  for (const auto& [k, v] : dict)
    if (k && k->kind == Kind::kStr && k->s == key) return v.get();
  return nullptr;
}

std::string PyValue::repr() const {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return b ? "True" : "False";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return fmt::format("{}", f);
    case Kind::kStr: return "'" + s.substr(0, 60) + "'";
    case Kind::kBytes: return fmt::format("<{} bytes>", s.size());
    case Kind::kTuple: return fmt::format("<tuple of {}>", items.size());
    case Kind::kList: return fmt::format("<list of {}>", items.size());
    case Kind::kDict: return fmt::format("<dict of {}>", dict.size());
    case Kind::kGlobal: return s;
    case Kind::kObject: return "<" + s + " object>";
    case Kind::kStorage: return "<" + s + " " + storage_key + ">";
    case Kind::kTensor: return fmt::format("<tensor {}>", fmt::join(size, "x"));
  }
  return "?";
}

// ---- unpickler ----

namespace {

using K = PyValue::Kind;

PyPtr make(K k) {
  auto p = std::make_shared<PyValue>();
  p->kind = k;
  return p;
}

// Globals a Megatron/torch checkpoint uses. kCall: "calling" it builds a value
// here; kInert: an opaque object (dtype, enum, numpy array, ...).
enum class Role {
  kOrderedDict, kRebuildTensor, kRebuildParameter, kRebuildFromType, kStorage, kNamespace, kEncode, kSet, kInert
};

bool allowed_global(const std::string& module, const std::string& name, Role* role) {
  const std::string g = module + "." + name;
  if (g == "collections.OrderedDict") return *role = Role::kOrderedDict, true;
  if (g == "torch._utils._rebuild_tensor_v2") return *role = Role::kRebuildTensor, true;
  if (g == "torch._utils._rebuild_parameter" || g == "torch._utils._rebuild_parameter_with_state")
    return *role = Role::kRebuildParameter, true;
  // A tensor with Python attributes (Megatron's fp32 main params carry
  // tensor_model_parallel etc.): _rebuild_from_type_v2(rebuild, type, args, state).
  if (g == "torch._tensor._rebuild_from_type_v2") return *role = Role::kRebuildFromType, true;
  if (module == "torch" && name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0)
    return *role = Role::kStorage, true;
  if (g == "argparse.Namespace") return *role = Role::kNamespace, true;
  if (g == "_codecs.encode") return *role = Role::kEncode, true;
  if (g == "builtins.set" || g == "builtins.frozenset") return *role = Role::kSet, true;
  static const std::set<std::string> inert = {
      "torch.float32", "torch.float16", "torch.bfloat16", "torch.float64", "torch.int64", "torch.int32",
      "torch.int8", "torch.uint8", "torch.bool", "torch.device", "torch.Size",
      "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype",
      "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "io.BytesIO", "_io.BytesIO", "builtins.slice",
      "torch.Tensor", "torch.nn.parameter.Parameter",
      "builtins.complex", "signal.Signals"};  // Megatron's args hold --exit-signal as signal.SIGTERM
  if (inert.count(g) || module.rfind("megatron.", 0) == 0) return *role = Role::kInert, true;
  return false;
}

DType storage_dtype(const std::string& cls, const std::string& what) {
  static const std::map<std::string, DType> m = {
      {"FloatStorage", DType::F32}, {"HalfStorage", DType::F16}, {"BFloat16Storage", DType::BF16},
      {"DoubleStorage", DType::F64}, {"LongStorage", DType::I64}, {"IntStorage", DType::I32},
      {"ByteStorage", DType::U8}, {"BoolStorage", DType::U8}, {"CharStorage", DType::U8},
      {"ShortStorage", DType::U16}};
  const auto it = m.find(cls.substr(cls.rfind('.') + 1));
  TRIPOD_CHECK(it != m.end(), "{}: storage type {} is not supported", what, cls);
  return it->second;
}

class Unpickler {
 public:
  Unpickler(const uint8_t* p, size_t n, std::string what) : p_(p), n_(n), what_(std::move(what)) {}
  size_t pos() const { return pos_; }

  PyPtr run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;                      // PROTO
        case 0x95: take(8); break;                     // FRAME
        case '.': TRIPOD_CHECK(stack_.size() == 1, "{}: pickle ends with {} values", what_, stack_.size());
          return stack_.back();
        case '(': marks_.push_back(stack_.size()); break;
        case '0': pop(); break;
        case '1': pop_mark(); break;
        case '2': push(top()); break;
        case 'N': push(make(K::kNone)); break;
        case 0x88: case 0x89: { auto v = make(K::kBool); v->b = op == 0x88; push(v); break; }
        case 'J': push_int(static_cast<int32_t>(le(take(4), 4))); break;
        case 'K': push_int(byte()); break;
        case 'M': push_int(static_cast<int64_t>(le(take(2), 2))); break;
        case 0x8a: case 0x8b: {                        // LONG1, LONG4: little-endian two's complement
          const uint64_t len = op == 0x8a ? byte() : le(take(4), 4);
          TRIPOD_CHECK(len <= 8, "{}: integer of {} bytes is too large", what_, len);
          const uint8_t* d = take(len);
          uint64_t v = len ? le(d, static_cast<int>(len)) : 0;
          if (len && len < 8 && (d[len - 1] & 0x80)) v |= ~uint64_t{0} << (8 * len);
          push_int(static_cast<int64_t>(v));
          break;
        }
        case 'I': case 'L': {                          // text INT / LONG
          std::string t = line();
          if (!t.empty() && t.back() == 'L') t.pop_back();
          if (t == "00" || t == "01") { auto v = make(K::kBool); v->b = t == "01"; push(v); break; }
          push_int(std::stoll(t));
          break;
        }
        case 'G': {
          const uint8_t* d = take(8);
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | d[i];  // big-endian
          auto v = make(K::kFloat);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'F': { auto v = make(K::kFloat); v->f = std::stod(line()); push(v); break; }
        case 'X': push_str(K::kStr, le(take(4), 4)); break;
        case 0x8c: push_str(K::kStr, byte()); break;
        case 0x8d: push_str(K::kStr, le(take(8), 8)); break;
        case 'T': push_str(K::kBytes, le(take(4), 4)); break;  // py2 str: bytes
        case 'U': push_str(K::kBytes, byte()); break;
        case 'B': push_str(K::kBytes, le(take(4), 4)); break;
        case 'C': push_str(K::kBytes, byte()); break;
        case 0x8e: push_str(K::kBytes, le(take(8), 8)); break;
        case ']': push(make(K::kList)); break;
        case 'l': { auto v = make(K::kList); v->items = pop_mark(); push(v); break; }
        case ')': push(make(K::kTuple)); break;
        case 't': { auto v = make(K::kTuple); v->items = pop_mark(); push(v); break; }
        case 0x85: case 0x86: case 0x87: {
          const size_t k = op - 0x84u;
          TRIPOD_CHECK(stack_.size() >= k + floor(), "{}: stack underflow", what_);
          auto v = make(K::kTuple);
          v->items.assign(stack_.end() - static_cast<ptrdiff_t>(k), stack_.end());
          stack_.resize(stack_.size() - k);
          push(v);
          break;
        }
        case '}': push(make(K::kDict)); break;
        case 'd': { auto v = make(K::kDict); set_items(*v, pop_mark()); push(v); break; }
        case 0x8f: push(make(K::kList)); break;        // EMPTY_SET: a list here
        case 0x90: { auto items = pop_mark(); append(*top(), items); break; }
        case 0x91: { auto v = make(K::kList); v->items = pop_mark(); push(v); break; }
        case 'a': { auto x = pop(); append(*top(), {x}); break; }
        case 'e': { auto items = pop_mark(); append(*top(), items); break; }
        case 's': { auto v = pop(); auto k = pop(); set_items(*top(), {k, v}); break; }
        case 'u': { auto items = pop_mark(); set_items(*top(), items); break; }
        case 'p': memo_[std::stoull(line())] = top(); break;
        case 'q': memo_[byte()] = top(); break;
        case 'r': memo_[le(take(4), 4)] = top(); break;
        case 0x94: memo_[memo_.size()] = top(); break;
        case 'g': push(memo(std::stoull(line()))); break;
        case 'h': push(memo(byte())); break;
        case 'j': push(memo(le(take(4), 4))); break;
        case 'c': {
          const std::string module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {
          auto name = pop(), module = pop();
          TRIPOD_CHECK(module->kind == K::kStr && name->kind == K::kStr, "{}: STACK_GLOBAL of non-strings", what_);
          push(global(module->s, name->s));
          break;
        }
        case 'R': { auto args = pop(); auto fn = pop(); push(call(*fn, *args)); break; }
        case 0x81: { auto args = pop(); auto cls = pop(); push(call(*cls, *args)); break; }
        case 0x92: { pop(); auto args = pop(); auto cls = pop(); push(call(*cls, *args)); break; }
        case 'b': { auto state = pop(); build(*top(), state); break; }
        case 'Q': { auto pid = pop(); push(persistent(*pid)); break; }
        default:
          TRIPOD_FAIL("{}: pickle opcode 0x{:02x} at byte {} is not allowed in a checkpoint (no code runs on load)",
                      what_, op, pos_ - 1);
      }
    }
  }

 private:
  const uint8_t* p_;
  size_t n_, pos_ = 0;
  std::string what_;
  std::vector<PyPtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PyPtr> memo_;

  uint8_t byte() { return *take(1); }
  const uint8_t* take(uint64_t k) {
    TRIPOD_CHECK(k <= n_ - pos_, "{}: pickle truncated at byte {}", what_, pos_);
    const uint8_t* r = p_ + pos_;
    pos_ += k;
    return r;
  }
  std::string line() {
    const size_t start = pos_;
    while (pos_ < n_ && p_[pos_] != '\n') ++pos_;
    TRIPOD_CHECK(pos_ < n_, "{}: pickle truncated in a text field", what_);
    return std::string(reinterpret_cast<const char*>(p_ + start), pos_++ - start);
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PyPtr v) { stack_.push_back(std::move(v)); }
  PyPtr pop() {
    TRIPOD_CHECK(stack_.size() > floor(), "{}: pickle stack underflow at byte {}", what_, pos_);
    PyPtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  PyPtr top() {
    TRIPOD_CHECK(stack_.size() > floor(), "{}: pickle stack underflow at byte {}", what_, pos_);
    return stack_.back();
  }
  std::vector<PyPtr> pop_mark() {
    TRIPOD_CHECK(!marks_.empty(), "{}: pickle MARK missing at byte {}", what_, pos_);
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyPtr> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  PyPtr memo(uint64_t k) {
    auto it = memo_.find(k);
    TRIPOD_CHECK(it != memo_.end(), "{}: pickle memo {} not set", what_, k);
    return it->second;
  }
  void push_int(int64_t x) {
    auto v = make(K::kInt);
    v->i = x;
    push(v);
  }
  void push_str(K k, uint64_t len) {
    auto v = make(k);
    const uint8_t* d = take(len);
    v->s.assign(reinterpret_cast<const char*>(d), len);
    push(v);
  }
  // Whether `target` is reachable from `from` (DFS; shared values visited once).
  static bool reaches(const PyValue* from, const PyValue* target) {
    std::vector<const PyValue*> todo{from};
    std::set<const PyValue*> seen;
    while (!todo.empty()) {
      const PyValue* v = todo.back();
      todo.pop_back();
      if (v == target) return true;
      if (!seen.insert(v).second) continue;
      for (const auto& it : v->items) todo.push_back(it.get());
      for (const auto& [k, x] : v->dict) todo.push_back(k.get()), todo.push_back(x.get());
    }
    return false;
  }
  // A container that would hold itself: pickle allows it, a checkpoint never
  // has one, and shared_ptr values in a cycle would never be freed (nor could
  // repr() or the importer walk them).
  void check_acyclic(const PyValue& container, const std::vector<PyPtr>& added) {
    for (const auto& a : added)
      TRIPOD_CHECK(!reaches(a.get(), &container), "{}: the pickle makes a {} contain itself (byte {}); a checkpoint "
                   "holds no cyclic objects (corrupt or crafted file)", what_,
                   container.kind == K::kList ? "list" : "dict or object", pos_);
  }
  void append(PyValue& list, const std::vector<PyPtr>& items) {
    TRIPOD_CHECK(list.kind == K::kList, "{}: APPEND to {}", what_, list.repr());
    check_acyclic(list, items);
    list.items.insert(list.items.end(), items.begin(), items.end());
  }
  void set_items(PyValue& d, const std::vector<PyPtr>& kv) {
    TRIPOD_CHECK(d.kind == K::kDict || d.kind == K::kObject, "{}: SETITEM on {}", what_, d.repr());
    TRIPOD_CHECK(kv.size() % 2 == 0, "{}: odd number of dict items", what_);
    check_acyclic(d, kv);
    for (size_t i = 0; i < kv.size(); i += 2) {
      bool replaced = false;
      if (kv[i]->kind == K::kStr)
        for (auto& [k, v] : d.dict)
          if (k->kind == K::kStr && k->s == kv[i]->s) v = kv[i + 1], replaced = true;
      if (!replaced) d.dict.emplace_back(kv[i], kv[i + 1]);
    }
  }
  PyPtr global(const std::string& module, const std::string& name) {
    Role role;
    TRIPOD_CHECK_HINT(allowed_global(module, name, &role),
                      "a Megatron-LM checkpoint holds tensors, containers and its args only; this file was not "
                      "written by torch.save of a Megatron checkpoint, or it was tampered with",
                      "{}: the pickle names the global {}.{}, which is not allowed (no code runs on load)", what_,
                      module, name);
    auto v = make(K::kGlobal);
    v->s = module + "." + name;
    return v;
  }
  PyPtr call(const PyValue& fn, const PyValue& args) {
    TRIPOD_CHECK(fn.kind == K::kGlobal, "{}: call of {}", what_, fn.repr());
    TRIPOD_CHECK(args.kind == K::kTuple, "{}: call of {} with {}", what_, fn.s, args.repr());
    Role role = Role::kInert;
    const size_t dot = fn.s.rfind('.');
    allowed_global(fn.s.substr(0, dot), fn.s.substr(dot + 1), &role);
    const auto& a = args.items;
    switch (role) {
      case Role::kOrderedDict: return make(K::kDict);
      case Role::kRebuildParameter:
        TRIPOD_CHECK(!a.empty() && a[0]->kind == K::kTensor, "{}: {} without a tensor", what_, fn.s);
        return a[0];
      case Role::kRebuildFromType:
        TRIPOD_CHECK(a.size() >= 3 && a[0]->kind == K::kGlobal && a[2]->kind == K::kTuple,
                     "{}: malformed {} record", what_, fn.s);
        return call(*a[0], *a[2]);
      case Role::kRebuildTensor: {
        TRIPOD_CHECK(a.size() >= 4 && a[0]->kind == K::kStorage && a[1]->kind == K::kInt &&
                         a[2]->kind == K::kTuple && a[3]->kind == K::kTuple && a[2]->items.size() == a[3]->items.size(),
                     "{}: malformed tensor record", what_);
        auto t = make(K::kTensor);
        t->s = a[0]->s;
        t->storage_key = a[0]->storage_key;
        t->dtype = a[0]->dtype;
        t->i = a[0]->i;  // storage elements
        t->storage_offset = a[1]->i;
        for (size_t d = 0; d < a[2]->items.size(); ++d) {
          TRIPOD_CHECK(a[2]->items[d]->kind == K::kInt && a[3]->items[d]->kind == K::kInt, "{}: malformed shape",
                       what_);
          t->size.push_back(a[2]->items[d]->i);
          t->stride.push_back(a[3]->items[d]->i);
        }
        return t;
      }
      case Role::kEncode: {  // _codecs.encode(str, 'latin1'): protocol 2's bytes
        TRIPOD_CHECK(!a.empty() && a[0]->kind == K::kStr, "{}: malformed bytes", what_);
        auto v = make(K::kBytes);
        const std::string& u = a[0]->s;  // UTF-8 of code points < 256
        for (size_t i = 0; i < u.size(); ++i) {
          const auto c = static_cast<uint8_t>(u[i]);
          if (c < 0x80) v->s += static_cast<char>(c);
          else if (i + 1 < u.size())
            v->s += static_cast<char>(((c & 0x03) << 6) | (static_cast<uint8_t>(u[++i]) & 0x3f));
        }
        return v;
      }
      case Role::kSet: {
        auto v = make(K::kList);
        if (!a.empty() && a[0]->kind == K::kList) v->items = a[0]->items;
        return v;
      }
      case Role::kStorage: case Role::kNamespace: case Role::kInert: {
        auto v = make(K::kObject);
        v->s = fn.s;
        v->items = a;
        return v;
      }
    }
    return make(K::kNone);
  }
  void build(PyValue& obj, const PyPtr& state) {
    if (obj.kind == K::kObject && state->kind == K::kDict) {
      check_acyclic(obj, {state});
      obj.dict = state->dict;
      return;
    }
    if (obj.kind == K::kObject || obj.kind == K::kTensor || obj.kind == K::kDict) return;  // state not needed
    TRIPOD_FAIL("{}: BUILD on {}", what_, obj.repr());
  }
  PyPtr persistent(const PyValue& pid) {
    TRIPOD_CHECK(pid.kind == K::kTuple && pid.items.size() >= 5 && pid.items[0]->kind == K::kStr &&
                     pid.items[0]->s == "storage" && pid.items[1]->kind == K::kGlobal &&
                     pid.items[2]->kind == K::kStr && pid.items[4]->kind == K::kInt,
                 "{}: persistent id {} is not a torch storage", what_, pid.repr());
    auto v = make(K::kStorage);
    v->s = pid.items[1]->s;
    v->dtype = storage_dtype(v->s, what_);
    v->storage_key = pid.items[2]->s;
    v->i = pid.items[4]->i;
    return v;
  }
};

}  // namespace

PyPtr unpickle(const uint8_t* data, size_t size, const std::string& what) {
  Unpickler u(data, size, what);
  try {
    return u.run();
  } catch (const std::logic_error& e) {  // std::stoll/stoull/stod of a text opcode (INT, FLOAT, PUT, GET)
    TRIPOD_FAIL("{}: malformed number in a text pickle opcode before byte {} ({}): the file is corrupt", what,
                u.pos(), e.what());
  }
}

// ---- torch.save files ----

TorchFile::TorchFile(const std::string& path) : zip_(path) {
  for (const auto& n : zip_.names()) {
    const size_t slash = n.find('/');
    if (slash != std::string::npos && n.compare(slash, std::string::npos, "/data.pkl") == 0) {
      prefix_ = n.substr(0, slash + 1);
      break;
    }
  }
  TRIPOD_CHECK_HINT(!prefix_.empty(), "the file must come from torch.save (PyTorch 1.6 or later)",
                    "{}: no <name>/data.pkl entry in the zip archive", path);
  const auto e = zip_.entry(prefix_ + "data.pkl");
  root_ = unpickle(e.data, e.size, path);
}

Tensor TorchFile::tensor_f32(const PyValue& t) const {
  TRIPOD_CHECK(t.kind == PyValue::Kind::kTensor, "{}: expected a tensor, found {}", path(), t.repr());
  const auto e = zip_.entry(prefix_ + "data/" + t.storage_key);
  const size_t es = dtype_size(t.dtype);
  TRIPOD_CHECK(e.size % es == 0, "{}: storage {} has {} bytes, not a multiple of {}", path(), t.storage_key, e.size,
               es);
  const int64_t elems = static_cast<int64_t>(e.size / es);
  int64_t numel = 1, last = t.storage_offset;
  for (size_t d = 0; d < t.size.size(); ++d) {
    TRIPOD_CHECK(t.size[d] >= 0 && t.stride[d] >= 0, "{}: negative size or stride", path());
    numel *= t.size[d];
    if (t.size[d] > 0) last += (t.size[d] - 1) * t.stride[d];
  }
  TRIPOD_CHECK(t.storage_offset >= 0 && (numel == 0 || last < elems), "{}: tensor exceeds its storage {} ({} elements)",
               path(), t.storage_key, elems);
  Tensor out = Tensor::empty(Shape(t.size.begin(), t.size.end()), DType::F32);
  float* o = out.data<float>();
  std::vector<int64_t> idx(t.size.size(), 0);
  for (int64_t k = 0; k < numel; ++k) {
    int64_t at = t.storage_offset;
    for (size_t d = 0; d < idx.size(); ++d) at += idx[d] * t.stride[d];
    const uint8_t* src = e.data + static_cast<size_t>(at) * es;
    switch (t.dtype) {
      case DType::F32: std::memcpy(&o[k], src, 4); break;
      case DType::F16: { uint16_t h; std::memcpy(&h, src, 2); o[k] = f16_to_f32(h); break; }
      case DType::BF16: { uint16_t h; std::memcpy(&h, src, 2); o[k] = bf16_to_f32(h); break; }
      default: TRIPOD_FAIL("{}: tensor of {} is not a floating-point weight", path(), t.s);
    }
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.size[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace tripod::interop
