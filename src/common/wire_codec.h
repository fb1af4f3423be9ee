// How the fields of a message (messages.h) are laid out in its payload: integers
// little-endian at their own width, strings as a u32 length and their bytes (any length, no
// terminator), record and importer lists as a u32 count and the fixed-size structs. Writer
// and Reader are the two halves of the same layout; a Reader that runs past the payload, or meets a
// value outside its enum, remembers it, and the message's decoding refuses the payload.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/protocol.h"

namespace cusnap::proto {

static_assert(std::endian::native == std::endian::little, "the wire is little-endian");

/// Appends fields to a payload.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  template <typename T>
    requires std::is_integral_v<T> || std::is_enum_v<T>
  void Put(T value) {
    Bytes(&value, sizeof value);
  }
  void Put(const ObjectId& id) {
    Put(id.creator_pid);
    Put(id.creator_start);
    Put(id.local_id);
  }
  void Put(const Capability& capability) {
    Put(capability.word[0]);
    Put(capability.word[1]);
  }
  void Put(std::string_view text) {
    Put(static_cast<uint32_t>(text.size()));
    Bytes(text.data(), text.size());
  }
  /// A list of fixed-size wire structs: a u32 count and the structs as they lie in memory.
  template <typename T>
    requires std::is_same_v<T, Record> || std::is_same_v<T, Importer> || std::is_same_v<T, ObjectId> ||
             std::is_same_v<T, CarrierChunk>
  void Put(const std::vector<T>& items) {
    Put(static_cast<uint32_t>(items.size()));
    Bytes(items.data(), items.size() * sizeof(T));
  }

 private:
  void Bytes(const void* data, size_t size) {
    if (size > 0) out_.append(static_cast<const char*>(data), size);  // data() may be null
  }
  std::string& out_;
};

/// Reads fields back in the order a Writer put them.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
    requires std::is_integral_v<T>
  void Get(T& value) {
    Bytes(&value, sizeof value);
  }
  /// An enum value; one outside the schema's list (no name) is a malformed payload.
  void Get(ShimState& state) {
    Bytes(&state, sizeof state);
    if (ok_ && ShimStateName(state) == kUnknownName) ok_ = false;
  }
  void Get(ObjectId& id) {
    id = ObjectId{};
    Get(id.creator_pid);
    Get(id.creator_start);
    Get(id.local_id);
  }
  void Get(Capability& capability) {
    Get(capability.word[0]);
    Get(capability.word[1]);
  }
  void Get(std::string& text) {
    uint32_t size = 0;
    Get(size);
    if (!Fits(size)) return;
    text.assign(in_.data() + at_, size);
    at_ += size;
  }
  template <typename T>
    requires std::is_same_v<T, Record> || std::is_same_v<T, Importer> || std::is_same_v<T, ObjectId> ||
             std::is_same_v<T, CarrierChunk>
  void Get(std::vector<T>& items) {
    uint32_t count = 0;
    Get(count);
    if (!Fits(size_t{count} * sizeof(T))) return;
    items.resize(count);
    Bytes(items.data(), size_t{count} * sizeof(T));
  }
  /// True while every read found its bytes and every value was valid.
  bool ok() const { return ok_; }
  /// True when every read found its bytes and every value was valid, and nothing is left.
  bool Complete() const { return ok_ && at_ == in_.size(); }

 private:
  bool Fits(size_t size) {
    if (ok_ && size > in_.size() - at_) ok_ = false;
    return ok_;
  }
  void Bytes(void* data, size_t size) {
    // An empty list has no storage to copy into (data() may be null: memcpy forbids it).
    if (!Fits(size) || size == 0) return;
    std::memcpy(data, in_.data() + at_, size);
    at_ += size;
  }
  std::string_view in_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace cusnap::proto
